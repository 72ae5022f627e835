"""Writes examples/articles.jsonl: a small hand-written stream with one copy of every kind.

The texts are written for this project (not taken from any data set). Every stage has
something to link: a re-crawl (url), a syndicated copy and a Bangla copy in another
Unicode composition (content), an appended update, a changed headline and a reworded
Bangla sentence (simhash: each within 3 bits of its original, so the four 16-bit bands
are certain to find it, under the 6-bit English and 7-bit Bangla thresholds), and a
Bangla translation of an English article (semantic). A related but different story, an
HTML page and two broken lines complete it; tests/test_sample.py holds it to that.

Run it again after editing: `python examples/make_sample.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

from streams.evaluation.corpus import decompose_bangla

METRO = (
    "Dhaka's metro rail will run until 11pm from Sunday, the operator said on Thursday, "
    "extending service by two hours after months of requests from commuters. "
    "The operator said trains will leave every ten minutes during the extra hours, "
    "and that ticket prices will not change. Officials expect about forty thousand more "
    "passengers a day once the late trains are known. Station staff will work in two shifts, "
    "and security at the busiest stations will be increased. The operator said it had tested "
    "the longer timetable for three weeks without passengers. Commuters who finish work late "
    "in Motijheel and Uttara welcomed the change, saying buses at night are slow and crowded."
)
METRO_UPDATE = "Update: the first week of the late service will be free."
CYCLONE = (
    "The Meteorological Department raised the cyclone warning signal to level seven at "
    "Chattogram and Cox's Bazar ports on Tuesday as a deep depression over the Bay of Bengal "
    "moved north. Fishing boats were told to return to shore and stay there until further notice. "
    "Local officials opened more than two thousand shelters along the coast and asked people in "
    "low-lying areas to move before nightfall. Forecasters said the storm could bring heavy rain "
    "and a surge of up to two metres above normal tide. Flights to Cox's Bazar were suspended for "
    "the evening, and river ferries in the south were halted."
)
FARES = (
    "Dhaka's metro rail operator is considering a new fare card for students, an official said "
    "on Monday. The card would cut fares by a third on weekdays, and could be introduced next year "
    "if the finance ministry agrees to cover the cost. Student groups have asked for lower fares "
    "since the line opened."
)
BANGLA = (
    "রবিবার থেকে ঢাকার মেট্রোরেল রাত এগারোটা পর্যন্ত চলবে বলে বৃহস্পতিবার পরিচালনাকারী সংস্থা জানিয়েছে। "
    "অতিরিক্ত সময়ে প্রতি দশ মিনিট পরপর ট্রেন ছাড়বে এবং টিকিটের দাম বাড়বে না। "
    "কর্মকর্তারা আশা করছেন দিনে আরও প্রায় চল্লিশ হাজার যাত্রী মেট্রোরেল ব্যবহার করবেন। "
    "মতিঝিল ও উত্তরার যাত্রীরা এই সিদ্ধান্তকে স্বাগত জানিয়েছেন।"
)
RAIN = (
    "আগামী তিন দিন দেশের বেশির ভাগ এলাকায় বৃষ্টি হতে পারে বলে আবহাওয়া অফিস জানিয়েছে। "
    "সিলেট ও ময়মনসিংহ বিভাগে ভারী বৃষ্টির সম্ভাবনা রয়েছে। নদীর পানি বাড়তে পারে, "
    "তাই নিচু এলাকার মানুষদের সতর্ক থাকতে বলা হয়েছে। কৃষকদের ধান কাটার কাজ দ্রুত শেষ করার পরামর্শ দেওয়া হয়েছে।"
)

FERRIES_HTML = (
    "<html><head><title>Ferries halted in the south</title></head><body>"
    "<nav>Home | Weather | Sport</nav><article><h1>Ferries halted in the south</h1>"
    "<p>River ferries on southern routes were halted on Tuesday evening as the cyclone signal was raised. "
    "Passengers were asked to wait at terminals until the authority gives an all-clear.</p></article>"
    "<footer>Copyright 2026 Coast News</footer></body></html>"
)


def syndicated(text: str) -> str:
    """What a partner's CMS does to wire copy: curly apostrophes, doubled spaces."""
    return text.replace("'", "\u2019").replace(". ", ".  ")


ARTICLES = [
    {
        "id": "metro-1",
        "url": "https://www.dhakadaily.example.com/city/metro-late-service",
        "title": "Metro rail to run until 11pm",
        "body": METRO,
        "published_at": "2026-11-26T08:00:00+06:00",
        "source": "dhakadaily",
    },
    {
        "id": "metro-1-recrawl",
        "url": "http://dhakadaily.example.com/city/metro-late-service/?utm_source=facebook&fbclid=IwAR0x",
        "title": "Metro rail to run until 11pm",
        "body": METRO,
        "published_at": "2026-11-26T08:00:00+06:00",
        "source": "dhakadaily",
    },
    {
        "id": "metro-1-wire",
        "url": "https://www.partnernews.example.net/wire/2026/11/26/metro",
        "title": "Metro rail to run until 11pm",
        "body": syndicated(METRO),
        "published_at": "2026-11-26T09:15:00+06:00",
        "source": "partnernews",
    },
    {
        "id": "metro-1-updated",
        "url": "https://www.dhakadaily.example.com/city/metro-late-service-updated",
        "title": "Metro rail to run until 11pm",
        "body": METRO + " " + METRO_UPDATE,
        "published_at": "2026-11-26T12:30:00+06:00",
        "source": "dhakadaily",
    },
    {
        "id": "metro-1-bn",
        "url": "https://bangla.example.com.bd/news/metro-rat-egaro",
        "title": "রাত এগারোটা পর্যন্ত চলবে মেট্রোরেল",
        "body": BANGLA,
        "published_at": "2026-11-26T10:00:00+06:00",
        "source": "bangla",
        "language": "bn",
    },
    {
        "id": "fares-1",
        "url": "https://www.dhakadaily.example.com/city/metro-student-fares",
        "title": "Student fare card considered for metro rail",
        "body": FARES,
        "published_at": "2026-11-26T14:00:00+06:00",
        "source": "dhakadaily",
    },
    {
        "id": "cyclone-1",
        "url": "https://coastnews.example.org/weather/signal-seven",
        "title": "Signal seven hoisted at two ports",
        "body": CYCLONE,
        "published_at": "2026-11-27T06:00:00Z",
    },
    {
        "id": "cyclone-1-headline",
        "url": "https://aggregator.example.com/story/88231",
        "title": "Danger signal seven hoisted at two ports",
        "body": CYCLONE,
        "published_at": "2026-11-27T07:00:00Z",
    },
    {
        "id": "rain-1",
        "url": "https://bangla.example.com.bd/weather/brishti",
        "title": "তিন দিন বৃষ্টির সম্ভাবনা",
        "body": RAIN,
        "published_at": "2026-11-27T03:00:00Z",
    },
    {
        "id": "rain-1-copy",
        "url": "https://another.example.com.bd/abohawa/123",
        "title": decompose_bangla("তিন দিন বৃষ্টির সম্ভাবনা"),
        "body": decompose_bangla(RAIN),
        "published_at": "2026-11-27T04:00:00Z",
    },
    {
        "id": "rain-1-edited",
        "url": "https://news.example.com.bd/desh/brishti-sotorkota",
        "title": "তিন দিন বৃষ্টির সম্ভাবনা",
        "body": RAIN.replace("নদীর পানি", "নদ-নদীর পানি"),  # "river water" -> "water of rivers and streams"
        "published_at": "2026-11-27T05:00:00Z",
    },
    {
        "id": "html-1",
        "url": "https://www.coastnews.example.org/weather/ferries?page=1&utm_campaign=push",
        "html": FERRIES_HTML,
        "published_at": "2026-11-27T08:00:00Z",
    },
]


def main(out: Path | None = None) -> None:
    out = out or Path(__file__).with_name("articles.jsonl")
    lines = [json.dumps(article, ensure_ascii=False) for article in ARTICLES]
    lines.insert(6, '{"id": "broken-1", "url": "https://example.com/x", "body": "unterminated')
    lines.append('{"id": "no-url", "title": "A record without a URL", "body": "Crawlers sometimes drop fields."}')
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} lines to {out}")


if __name__ == "__main__":
    main()
