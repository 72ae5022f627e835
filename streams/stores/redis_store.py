"""The production state store: the same `StateStore` on Redis or Redis Cluster, shared by every worker.

Redis spends about 50 bytes on every key, so nothing here has a key of its own:
entries live as fields of hashes split into a fixed number of buckets (a small
hash is stored as one compact listpack). Under a configurable prefix (default
`dedup:`), with `B(x)` the first `bucket_bits` bits of a hash of `x` (4 hex digits
by default: `redis_bucket_bits`, below) and `{t}` a hash tag of 2 hex digits (below):

| hash | field | value |
|---|---|---|
| `v:{t}…` of `B(doc_id)` | doc_id | the verdict: its stamp, its `seq`, a space, then `_verdict_value` (model by code) |
| `x:{t}…` of `B(key)` | 64 more bits of the key's hash, an integer | stamp, then the canonical (or doc in review) |
| `c:{t}…` of `B(doc_id)` | doc_id | a canonical's first-seen `seq` (marks it registered; s: holds the stamp) |
| `s:{t}n`, n = `seq >> 8` | seq | the canonical's stamp, simhash and figures (22 base64 digits), its doc_id |
| `b:{t}{language}:{table}:{key >> shift}` | the key's low bits | the `seq`s of the canonicals with that key |
| `g:{t}…` of `B(doc_id)` | doc_id | members of a canonical's group besides itself, times 65536, plus the stamp |
| (the same) | `\x00` + 16 hex digits | while a batch is written: a member's growth of a group ("Writes") |
| `p:{t}…` of `B(doc_id)` | doc_id | while a batch is written: a linked document's pending link: stamp, space, link |
| `seq` (string) | | the last canonical `seq` given out (never reused, also after a relink removed one) |
| `vseq` (string) | | the last verdict `seq` given out: the order replay restores in |
| `clock` (string) | | the stream's time: the newest `published_at` applied (moves forward only) |
| `sweep` (hash) | `day`, `at`, `begun`, `horizon` | the sweep's cursor and how far it removed verdicts (`_HORIZON`) |
| `oldest` (hash) | `v`, `x`, `g`, `p`, `s` | a family's oldest stamp, or earlier: a pass skips one with none expired |
| `languages` (hash) | language | every language a canonical was registered in (the sweep finds band entries by it) |
| `layout` (string) | | `LAYOUT`/`bucket_bits`[/bands], a space, a token drawn when the state was marked ("Lost") |
| `replay` (string) | | an unfinished `dedup replay`'s last restored position: nothing else writes meanwhile ("Lost") |
| `{replay}:clock` (string) | | that replay's clock when it began (`clearing` during a `--fresh` clear) |
| `lock:fence:{t}` (string) | | the newest lease epoch that wrote in slot group `t`; made with `layout` ("Lost") |
| `models:{00}` (hash) | `n{name}`, `c{code}`, `#` | embedding models' codes (a verdict names its model by code) |

Band keys are a fingerprint's keys in the state's band layout (`streams.features.bands`): four
16-bit keys (`4x16`) in 1,024 buckets a table (`shift` 6, the field the whole key), or eight
32-bit keys (`8x32+p1`) in 2**`bucket_bits` buckets a table (`shift` 32 - bits, the field the low
16 or more). A lookup reads, in each table, its key's bucket (the key and, with probes, the keys
one bit away in the field's bits: one HMGET of 17 fields) and, with probes, one bucket more for
each bit of the bucket's part, one field each: 136 buckets a query for `8x32+p1`.

Redis Cluster. A bucket's hash tag `{t}` is the first 2 hex digits of its bucket (of
`n % 256`, of `bucket % 256`), so the buckets of every family fall into 256 slot
groups that the cluster spreads over its masters, and the v:, x:, c:, g: buckets of one
tag share a slot. The singletons (seq, vseq, clock, sweep, languages, layout, the lock)
hash whole, each wherever its slot is. Every script touches keys of one slot: a read or
write of many buckets is one script call per slot, all pipelined in one round trip
(redis-py's cluster pipeline sends each master its share, and its client follows MOVED
and ASK: a failover, a resharding). On one server every key is in the one slot group
that server owns: the same code makes one call where a cluster makes several. A cluster
is chosen by the URL (`redis+cluster://`, `connect`).

Retention (`RetentionSettings`, in the stream's time): a stamp is the day of an entry's
`published_at` (4 hex digits), so an entry is hidden once all of its day is older than the
clock less its family's retention: verdicts (`verdicts_days`), exact keys and group sizes
(`exact_days`), a canonical's s:, c: and band entries (`bands_days`, by its s: stamp; band
entries hold seqs, filtered on read). Every read hides an expired entry at once, every write
treats it as absent, and `expire` removes it later, bucket by bucket (a cursor in Redis, never
LRU); the streaming agents sweep after a batch, under the lease (`stores.batched`). The
sweep reads every bucket once a day instead of keeping a per-day index of what to remove,
which would repeat every entry's field (a doc_id, 20 hex digits of a key's hash) in memory:
measured on the 100,000-document run of `benchmarks/redis_memory.py` (293 bytes per canonical,
stamps included), such an index cost 130 bytes more per canonical as appended strings, 332 as
sets; the stamps cost 10 (283 before them). The scripts get the clock as an argument (its key
is in another slot), read with the batch.

Layouts. A state written in another layout (before the stamps, before the hash tags), with
another bucket count or another band layout would be misread: the store refuses it in one line
(`LayoutMismatch`: set the bucket bits or bands it names, or rebuild it with `dedup replay`). An
empty state is marked with `{prefix}layout` on first use (`4/16`: layout 4, 16 bucket bits, 4x16
bands; `4/16/8x32+p1` with those bands); data (a seq, vseq, clock, sweep or languages key) without
it is an older layout. A layout 2 state (`2/16`, a plain `2` with 12 bucket bits) is read and written
as it was, its exact keys' fields in hex, and so is a layout 3 state: their s: entries
(`{simhash: 16 hex}{stamp}{doc_id}`) hold no figures, so stage 3 checks none of their canonicals' (`_Entries`);
`dedup replay --fresh` rebuilds either in layout 4.

Lost. A batch reads the layout marker and the replay's checkpoint in its first round trip. A marker
this store saw and that is gone now means Redis was emptied under it, and one with another token
that the state was rebuilt under it (`dedup replay --fresh` while the process waited for the replay:
its model codes, and a layout 2 state's hex exact keys, are the old state's); either way it never
writes again. A marker that is gone means Redis was emptied under it (restarted without its data,
flushed, failed over to an empty replica): written into, the state would give redelivered documents
second verdicts, make duplicates canonicals and restart the verdict counter that replay orders by.
The store refuses every write from then on (`StateLost`: the worker's batch is retried and /readyz
says why) until the state is rebuilt with `dedup replay` and the process restarted. On a cluster a
master can also fail over to a replica that had not copied it (its first copy still under way): a
third of the state goes, and the marker may well not be in it. Each slot group's fence key is made
with the marker and only ever updated after, so a fenced write (a lease's publication, a batch's
script) that finds its group's fence missing is refused as `LOST` in the script itself, and a store
that starts on a marked state with some fences gone refuses it too. While a replay's
checkpoint is there (running, or stopped half-way) only the replay writes: a state half restored
lacks canonicals that later documents must link to.

Every value that holds a caller's strings ends with them (after fixed-width fields,
the first of two prefixed by its length), so no id, however strange, can break the
encoding.

Writes: there is no transaction across slots, so a batch (`apply`) is written in rounds of
one-slot scripts, each idempotent, in an order that a crash between any two leaves a state
the batch's redelivery completes (re-applying a half-applied batch gives the full batch's
result). A round is one script call per slot (`_BULK`, one call on one server) carrying that
slot's items of the round in the order the writes came, with one answer per item (a call
per write made redis-py's per-command work most of `dedup replay`'s client time).

1. checks: the lease key still holds our token, the verdicts of the batch's documents (one
   decided meanwhile has its whole group dropped), the clock;
2. seqs: `INCRBY` on the counters draws exactly the verdict and canonical seqs the batch
   needs (a c: entry read first: a canonical registered already keeps its seq); and the
   pending link of each linked document (a duplicate, one under review), before any claim;
3. exact keys (first writer wins; the same holder claiming again changes nothing) and the
   c: entry of each new canonical (compare-and-set on the seq read in 2);
4. its s: entry (set where absent) and its band entries (the seq added where not there); a
   removed canonical's band and s: entries go here; and each member's growth of its group,
   with a marker field in the group's bucket (in the same script: a growth is counted once
   however often the batch is applied again);
5. verdicts, last: first writer wins, atomic per document (one field in one slot); a removed
   canonical's c: entry goes here, so a redelivered removal still finds its seq;
6. group sizes: the markers of 4 taken out, or for a verdict not recorded in 5 the growth
   undone with its marker; shrinks (a relink) here, each with a marker of its own (the round
   sent again by a cluster client shrinks once); the pending links of 2 taken out;
7. the shrinks' markers taken out (only a batch that shrinks a group has this round).

A crash after 3 leaves a c: entry whose s: entry is missing: the redelivery finds it dead
and registers the canonical under a new seq (a seq left in a band entry without an s: entry
is no candidate). A crash after 4 leaves a live registration: registered again, its band
entries are written where missing. A canonical's claims name the document itself, so its
redelivery finds them its own; meanwhile another document may be linked to that document,
which the redelivery then decides the same way (it holds the keys). A linked document's
claims name its canonical (or, under review, itself): decided again, it would find them and
be a URL duplicate where it was a near-duplicate, or a canonical where it was under review;
its pending link (2) is what the redelivery records instead (`pending_of`, the cascade's
"Redelivered"). A pending link whose redelivery never comes (the input topic dropped the
records, the group was moved past them) ages as a verdict does and is swept with them
(`verdicts_days`: past it, a redelivery is a new document). A crash after 4 leaves a group
grown for a member not yet recorded: the redelivery decides it again, finds its marker and
grows nothing more. A crash between 5 and 6 leaves groups counted and their markers: the
redelivery finds the verdicts standing and takes the markers out (`_settle`); a group is
never left short, which would let a relink link its canonical back (a chain). A member
decided differently on redelivery (rare: its canonical was relinked meanwhile) leaves the
first group one too many and its marker, swept with the group family (`exact_days`): too
many refuses a relink it could have made, never makes a chain. An unfenced writer racing a
verdict in 5 loses the document (`Applied.lost`), and its growth is undone in 6.

Fencing. The registration lease (`redis_lock`) carries an epoch, drawn by `INCR` once the
lock is ours, so every later holder has a greater one. `RedisLock(fence=store.fence)`
publishes it to the fence key of every slot group before `acquire` returns, i.e. before the
new holder reads anything; every writing script compares the writer's epoch with the fence
key of each slot group it writes in and refuses an older one (`FENCED`: `LeaseLost`). So a holder paused past its
lease, waking up anywhere in `apply`, writes nothing in a slot once the new holder has
published there, and whatever it wrote before that the new holder reads: no write of an
older holder lands after a newer one has read. Its batch stops at the refused round; what it
wrote is completed by its redelivery, as after a crash. Should the epoch counter go back (its
key deleted, its INCR lost in a failover), a fence already holding the drawn epoch tells the
new holder, which moves the counter past it while the lock is still its own and draws again.
The epoch counter is per lock name and the fences per prefix: a prefix takes one lock name
(the workers, `dedup replay` and `dedup relink` all use `{prefix}lock:register`). A MOVED or ASK mid-batch is followed
by the cluster client, which sends the command again to the slot's new master (a MOVED or
ASK command was not run). A connection lost or timed out after the node ran a round is sent
again too (redis-py's cluster client retries the whole pipeline), so every item must take
being run twice: a verdict that finds the very value it writes answers as written (not as
another writer's, which would undo its member's growth and leave the group short); the group
markers make a growth count once, and a batch's shrink (a relink's) too: it is made after its
member's verdict, with a marker taken out a round later. A shrink outside a batch
(`leave_group` alone) is not marked. A round that fails otherwise raises before the next one starts,
so nothing is written out of order, and the redelivered batch runs every round again. A
cluster failover can lose the last writes a master acknowledged (replication is
asynchronous). `WAIT n timeout` would block until n replicas have the client's writes, so a
batch could be acknowledged to Kafka only once replicated; it is not used: it is per
connection and per node while a cluster pipeline spreads a batch over several, and it still
cannot make the write durable across a failover (a replica that has it may not be the one
promoted). A lost write is a document that looks undecided: its verdict and its writes are
made again when it is redelivered, and a lost fence publication only weakens the fence in
that slot until the next lease publishes. A lost `INCR` of a counter could give out a seq
twice: s: entries are set where absent, so the second canonical of a seq never overwrites
the first (it is then no candidate itself); a verdict seq is an order only.

Buckets stay small enough for the compact encoding (a listpack: Redis keeps a hash so while it
has at most `hash-max-listpack-entries` fields, 512 by default, none longer than
`hash-max-listpack-value`, 64 bytes) while the live state fits its bucket count: the exact keys,
two a canonical, fill theirs first, so 2**`bucket_bits` buckets hold about 2**bits * 256
canonicals live in the retention window (16 bits: 16M; 12 bits: 1M). A hash past either limit
becomes a hash table for good, about 80 bytes more an entry: 520 bytes a canonical at 10M with 12
bits, 252 with 16 (`benchmarks/redis_memory.py`, README "Memory"). More buckets cost a key each
(about 70 bytes) while they hold few entries: through the cascade, 100,000 documents take 482
bytes a canonical with 16 bits against 292 with 12; and the sweep reads 65,536 buckets a family
a day. The s: buckets hold 256 seqs each and a 4x16 b: bucket 64 band values, whatever the size;
a band value's seqs pass 64 bytes from about 1M canonicals, and those hash tables cost about 40
bytes a canonical. An 8x32+p1 b: bucket holds an entry for each canonical of its language whose key
falls in it (a seq, rarely a few): listpacks up to about 2**bits x 512 canonicals a language.
A value holds a caller's strings (doc ids; the embedding model by code): a verdict
naming a long id passes 64 bytes, so the compose file's Redis runs with
`hash-max-listpack-value` 256 (README, "Memory").
"""

from __future__ import annotations

import binascii
import hashlib
import re
import secrets
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import redis
from redis._parsers.commands import CommandPolicies, RequestPolicy, ResponsePolicy
from redis.cluster import RedisCluster
from redis.commands.policies import StaticPolicyResolver
from redis.crc import key_slot
from redis.exceptions import NoScriptError

from streams.config import RetentionSettings, Settings
from streams.core.model import (
    CONTENT_KEY_CHARS,
    DAY_S,
    Canonical,
    Link,
    Stage,
    Verdict,
    clamped,
    expired,
    keep_seconds,
    verdict_gone,
)
from streams.core.ports import LayoutMismatch
from streams.features.bands import DEFAULT, FOUR_BY_16, BandLayout
from streams.stores.packing import DirectPacker
from streams.stores.redis_lock import Lease, LeaseLost
from streams.stores.writes import (
    CanonicalWrite,
    ClaimWrite,
    GrowWrite,
    RemoveCanonicalWrite,
    ReplaceVerdictWrite,
    ReplaceWrite,
    VerdictWrite,
    Write,
)

_SIMHASH_HEX = 16
_DAY_HEX = 4
"""A stamp is the day (Unix s // 86400) of a `published_at`, in 4 hex digits: up to day 65535 (year 2149)."""
_DAY_MAX = 0xFFFF
_NONE_YET = _DAY_MAX + 1
"""A family's oldest stamp in a new state: later than any stamp, so the first entry written moves it back."""
_GROUP_DAY = 1 << 16
"""A group size is one integer, members * 65536 + day: a listpack keeps it in 4 bytes, a string would take 7."""
_TAGS = 256
"""Hash tags (slot groups) the buckets of every family share: `{00}` to `{ff}`, spread over a cluster's masters."""
_TAG_HEX = [f"{tag:02x}" for tag in range(_TAGS)]
"""Each tag as key names spell it: every name is made from this list."""
_SWEEP_BUCKETS = 1024
"""Hash buckets one sweep step may read: it stops at the first after `_SWEEP_FIELDS` fields read."""
_SWEEP_FIELDS = 5_000
"""Fields one sweep step reads at most, give or take a bucket: a few milliseconds of Redis time."""
LAYOUT = "4"
"""The key layout this code writes (`{prefix}layout`): hash-tagged buckets, exact keys' fields integers, s: entries
with the canonical's figures."""
_HEX_FIELDS = "2"
"""The layout before 3, still read and written as it was: its exact keys' fields are 20 hex digits (its s:
entries layout 3's)."""
_NO_FIGURES = "3"
"""The layout before 4, still read and written as it was: its s: entries hold no figures (`_Entries`)."""
_BANDS_BEFORE = FOUR_BY_16.name
"""The band layout of a marker that names none (`2/16`): the only one before band layouts were recorded."""

# Every script touches keys of one slot only. A writing script's KEYS[1] is its slot's fence key and
# ARGV[1] the writer's lease epoch (0: unfenced): a write under an older epoch than the newest seen in
# the slot is refused (error FENCED), a newer one becomes the slot's. ARGV[2] is the clock (the clock key
# is a key of its own slot), by which `_AGE` judges an entry's age: an entry of day d is past a retention
# of `keep` seconds (0: forever) once the last second of its day is older than clock - keep, as
# `model.expired` says of `_day_end(d)`.
_FENCE = """
local epoch = tonumber(ARGV[1])
if epoch > 0 then
  local seen = redis.call('GET', KEYS[1])
  if not seen then return redis.error_reply('LOST ' .. KEYS[1]) end
  seen = tonumber(seen)
  if seen > epoch then return redis.error_reply('FENCED a newer lease holder wrote here') end
  if seen < epoch then redis.call('SET', KEYS[1], epoch) end
end
"""
_AGE = """
local clock = tonumber(ARGV[2])
local function expired(day, keep)
  keep = tonumber(keep)
  return keep > 0 and day * 86400 + 86399 < clock - keep
end
local function stamp(value) return tonumber(string.sub(value, 1, 4), 16) end
"""
_WRITE = _FENCE + _AGE
# Publishes a lease's epoch to the fence keys of one slot (on one server, all of them); returns the newest
# epoch that was there (as new or newer: another lease drew that epoch or a later one).
_PUBLISH = """
local newest = 0
for i = 1, #KEYS do
  local seen = redis.call('GET', KEYS[i])
  if not seen then return redis.error_reply('LOST ' .. KEYS[i]) end
  seen = tonumber(seen)
  if seen < tonumber(ARGV[1]) then redis.call('SET', KEYS[i], ARGV[1]) end
  if seen > newest then newest = seen end
end
return newest
"""
# An embedding model's code, drawn the first time the model is named (the same for every process).
_REGISTER_MODEL = """
local code = redis.call('HGET', KEYS[1], 'n' .. ARGV[1])
if code then return code end
code = tostring(redis.call('HINCRBY', KEYS[1], '#', 1))
redis.call('HSET', KEYS[1], 'n' .. ARGV[1], code, 'c' .. code, ARGV[1])
return code
"""
# Many hash fields of one slot in one command (a pipeline of HGETs costs a command each in the client).
_FIELDS = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGET', KEYS[i], ARGV[i]) or false end
return out
"""
# A band lookup's buckets of one slot. ARGV: the in-bucket flips (0: none, else the key's low bits a probe
# flips: `shift`), the field mask, then one argument a key: '=' and the field to read alone (a bucket a
# flip moved the key to), or the key itself, read with its neighbours one bit away in the low bits (its own
# bucket). One answer a key: the values found there, space-separated ('' none).
_BAND_FIELDS = """
local flips, mask = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS do
  local arg = ARGV[i + 2]
  if string.sub(arg, 1, 1) == '=' then
    out[i] = redis.call('HGET', KEYS[i], string.sub(arg, 2)) or ''
  else
    local key = tonumber(arg)
    local fields = {key % (mask + 1)}
    for j = 0, flips - 1 do fields[j + 2] = bit.band(bit.bxor(key, bit.lshift(1, j)), mask) end
    local found = redis.call('HMGET', KEYS[i], unpack(fields))
    local parts = {}
    for j = 1, #fields do
      if found[j] then parts[#parts + 1] = found[j] end
    end
    out[i] = table.concat(parts, ' ')
  end
end
return out
"""
_ADVANCE = """
local clock = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > clock then
  redis.call('SET', KEYS[1], ARGV[1])
  return tonumber(ARGV[1])
end
return clock
"""
# KEYS: the families' oldest stamps (`{prefix}oldest`); ARGV: family, day, ...: each family's oldest stamp moved
# back to the day given where it is later. A family without one stays without: unknown, read by every pass.
_OLDER = """
for i = 1, #ARGV, 2 do
  local oldest = redis.call('HGET', KEYS[1], ARGV[i])
  if oldest and tonumber(ARGV[i + 1]) < tonumber(oldest) then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
"""
# KEYS: a hash; ARGV: field, value: the field moved up to the value (never back).
_RAISE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current or tonumber(ARGV[2]) > tonumber(current) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1
"""
# A counter moved past a seq given from outside (a replay keeps the seqs it restores).
_AT_LEAST = """
if tonumber(ARGV[1]) > tonumber(redis.call('GET', KEYS[1]) or '0') then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
"""
# KEYS: fence, s bucket; ARGV: epoch, clock, bands retention ('' any age), where an entry's stamp begins, the
# seqs: removes their entries (those still past the retention, when one is given); returns how many it removed.
_DROP_ENTRIES = (
    _WRITE
    + """
local removed = 0
local day_at = tonumber(ARGV[4])
for k = 5, #ARGV do
  local entry = redis.call('HGET', KEYS[2], ARGV[k])
  if entry and (ARGV[3] == '' or expired(tonumber(string.sub(entry, day_at, day_at + 3), 16), ARGV[3])) then
    redis.call('HDEL', KEYS[2], ARGV[k])
    removed = removed + 1
  end
end
return removed
"""
)
# A round of a batch's writes, one call per slot (`_Bulk`): KEYS: the fence keys of every slot group its
# buckets are in (ARGV[3] of them), then the buckets; ARGV: epoch, clock, fence count, verdicts retention,
# exact retention, then the items in order, each a code, its bucket's index (from 1, after the fences) and
# its arguments. Every fence is checked before anything is written: a newer epoch in any refuses the whole
# call (FENCED). One answer per item, in order (items on one key meet in the order the writes came):
# 'c' claim an exact key: field, stamped holder. Set where absent (an expired key is free); its holder.
# 'r' replace an exact key: field, expected holder, new holder, new stamp ('' the key keeps its own). Only
#     while the live key holds the expected one; 1 or 0.
# 'g' register (c bucket): doc_id, the seq it is expected to hold ('' none), its new seq. Compare-and-set;
#     the seq it holds afterwards (0: none).
# 'e' an s: entry: seq, entry, set where absent. 'D' a field removed (an s: entry, a pending link): its name.
# 'p' a pending link (p bucket): doc_id, its stamp, a space and the encoded link; set.
# 'b' a band entry: band value, seq, added unless there already (a write applied again changes nothing);
#     'B' the seq taken out (the field goes when it holds no other).
# 'u' unregister (c bucket): doc_id, seq: forgotten if it still names seq; 1 or 0.
# 'v' record a verdict (v bucket): doc_id, stamp, encoded verdict, its seq (drawn before). First writer wins; a
#     verdict past its retention is no verdict. 'V' the same and the encoded verdict it replaces, twice (its
#     model by code, and by name as written before the codes): written only while the stored one is still
#     that one (its stamp and seq aside). The seq, or 0 when not written. An item that finds the very value it
#     writes (its seq drawn for this writer) wrote it already: a round sent again by the cluster client after
#     a lost reply; the seq.
# 'n' a group size (g bucket): doc_id, members to add (negative: fewer), the day of the latest member (0 for
#     a shrink: the group keeps its stamp). An expired group counts from nothing again; a group back to its
#     canonical alone loses its field. The members besides the canonical.
# 'm' a batch's growth of a group, once (g bucket): its marker field, doc_id, members to add, day. The marker
#     (set with the growth, in the same script) makes the growth happen once however often the batch is
#     applied again; the group's members. A shrink (negative members, after its member's verdict) the same,
#     once however often its round is sent again: its marker holds the group's stamp, which the shrink keeps.
#     'M' a marker removed (a growth's once the member's verdict is recorded): marker.
#     'x' the growth undone, its verdict not recorded (another writer decided the member): marker, doc_id,
#     members; only where the marker was still there.
# 'k' the clock the items after it are judged at (what has expired): a batch's document's own (`_Bulk.at`).
_BULK = (
    """
local epoch, fences = tonumber(ARGV[1]), tonumber(ARGV[3])
if epoch > 0 then
  local seen = {}
  for f = 1, fences do
    local fence = redis.call('GET', KEYS[f])
    if not fence then return redis.error_reply('LOST ' .. KEYS[f]) end
    seen[f] = tonumber(fence)
    if seen[f] > epoch then return redis.error_reply('FENCED a newer lease holder wrote here') end
  end
  for f = 1, fences do
    if seen[f] < epoch then redis.call('SET', KEYS[f], epoch) end
  end
end
"""
    + _AGE
    + """
local keep_verdicts, keep_exact = ARGV[4], ARGV[5]
local function grow(key, field, added, day)
  local value = tonumber(redis.call('HGET', key, field) or '0')
  local members, since = math.floor(value / 65536), value % 65536
  if value > 0 and expired(since, keep_exact) then members, since = 0, 0 end
  if added == 0 then return members end
  members = members + added
  if members <= 0 then
    redis.call('HDEL', key, field)
    return 0
  end
  redis.call('HSET', key, field, members * 65536 + math.max(since, day))
  return members
end
local out = {}
local a = 6
while a <= #ARGV do
  local code, key = ARGV[a], KEYS[fences + tonumber(ARGV[a + 1])]
  local answer = 1
  if code == 'c' then
    local current = redis.call('HGET', key, ARGV[a + 2])
    if not current or expired(stamp(current), keep_exact) then
      current = ARGV[a + 3]
      redis.call('HSET', key, ARGV[a + 2], current)
    end
    answer = string.sub(current, 5)
    a = a + 4
  elseif code == 'r' then
    local current = redis.call('HGET', key, ARGV[a + 2])
    answer = 0
    if current and string.sub(current, 5) == ARGV[a + 3] and not expired(stamp(current), keep_exact) then
      local kept = ARGV[a + 5] ~= '' and ARGV[a + 5] or string.sub(current, 1, 4)
      redis.call('HSET', key, ARGV[a + 2], kept .. ARGV[a + 4])
      answer = 1
    end
    a = a + 6
  elseif code == 'g' then
    local current = redis.call('HGET', key, ARGV[a + 2]) or ''
    if current ~= ARGV[a + 3] then
      answer = tonumber(current) or 0
    else
      redis.call('HSET', key, ARGV[a + 2], ARGV[a + 4])
      answer = tonumber(ARGV[a + 4])
    end
    a = a + 5
  elseif code == 'e' then
    redis.call('HSETNX', key, ARGV[a + 2], ARGV[a + 3])
    a = a + 4
  elseif code == 'p' then
    redis.call('HSET', key, ARGV[a + 2], ARGV[a + 3])
    a = a + 4
  elseif code == 'D' then
    answer = redis.call('HDEL', key, ARGV[a + 2])
    a = a + 3
  elseif code == 'b' or code == 'B' then
    local value, seq = ARGV[a + 2], ARGV[a + 3]
    local current = redis.call('HGET', key, value)
    if code == 'b' then
      if not current then
        redis.call('HSET', key, value, seq)
      elseif not string.find(' ' .. current .. ' ', ' ' .. seq .. ' ', 1, true) then
        redis.call('HSET', key, value, current .. ' ' .. seq)
      end
    elseif current then
      local kept = {}
      for token in string.gmatch(current, '%S+') do
        if token ~= seq then kept[#kept + 1] = token end
      end
      if #kept == 0 then
        redis.call('HDEL', key, value)
      else
        redis.call('HSET', key, value, table.concat(kept, ' '))
      end
    end
    a = a + 4
  elseif code == 'u' then
    answer = 0
    if redis.call('HGET', key, ARGV[a + 2]) == ARGV[a + 3] then
      redis.call('HDEL', key, ARGV[a + 2])
      answer = 1
    end
    a = a + 4
  elseif code == 'v' or code == 'V' then
    local current = redis.call('HGET', key, ARGV[a + 2])
    local value = ARGV[a + 3] .. ARGV[a + 5] .. ' ' .. ARGV[a + 4]
    local live = current and not expired(stamp(current), keep_verdicts)
    if current == value then
      answer = 2  -- this item's own write, sent again (its seq is this writer's): written already
    elseif code == 'v' then
      answer = live and 0 or 1
    else
      local held = live and string.sub(current, string.find(current, ' ', 1, true) + 1)
      answer = held and (held == ARGV[a + 6] or held == ARGV[a + 7]) and 1 or 0
    end
    if answer == 1 then redis.call('HSET', key, ARGV[a + 2], value) end
    if answer > 0 then answer = tonumber(ARGV[a + 5]) end
    a = a + (code == 'v' and 6 or 8)
  elseif code == 'n' then
    answer = grow(key, ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]))
    a = a + 5
  elseif code == 'm' then
    local added, day = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
    if added < 0 then day = tonumber(redis.call('HGET', key, ARGV[a + 3]) or '0') % 65536 end
    if redis.call('HSETNX', key, ARGV[a + 2], math.abs(added) * 65536 + day) == 1 then
      answer = grow(key, ARGV[a + 3], added, added > 0 and day or 0)
    else
      answer = grow(key, ARGV[a + 3], 0, 0)
    end
    a = a + 6
  elseif code == 'M' then
    answer = redis.call('HDEL', key, ARGV[a + 2])
    a = a + 3
  elseif code == 'x' then
    answer = 0
    if redis.call('HDEL', key, ARGV[a + 2]) == 1 then
      answer = grow(key, ARGV[a + 3], -tonumber(ARGV[a + 4]), 0)
    end
    a = a + 5
  elseif code == 'k' then
    clock = tonumber(ARGV[a + 2])
    a = a + 3
  else
    return redis.error_reply('unknown item ' .. code)
  end
  out[#out + 1] = answer
end
return out
"""
)
# The sweep, one slot's hashes of one family: KEYS: fence, the hashes; ARGV: epoch, clock, retention, where
# the stamp is ('v'alue prefix, 'g'roup integer, 'p'ending link's prefix if any), the most fields to remove,
# the most fields to read.
# Removes expired fields hash by hash and stops at the hash where either runs out. Returns how many it
# removed, how many hashes it finished (the cursor moves past those) and how many fields it read.
_EXPIRE_FIELDS = (
    _WRITE
    + """
local left, budget, read = tonumber(ARGV[5]), tonumber(ARGV[6]), 0
for i = 2, #KEYS do
  if read >= budget then return {tonumber(ARGV[5]) - left, i - 2, read} end
  local flat = redis.call('HGETALL', KEYS[i])
  read = read + #flat / 2
  for j = 1, #flat, 2 do
    local value, day = flat[j + 1], nil
    if ARGV[4] == 'g' then
      day = tonumber(value) % 65536
    elseif ARGV[4] == 'v' or string.sub(value, 5, 5) == ' ' then
      day = stamp(value)
    end
    if day and expired(day, ARGV[3]) then
      if left == 0 then return {tonumber(ARGV[5]), i - 2, read} end
      redis.call('HDEL', KEYS[i], flat[j])
      left = left - 1
    end
  end
end
return {tonumber(ARGV[5]) - left, #KEYS - 1, read}
"""
)
# KEYS: an s: bucket; ARGV: clock, bands retention, where an entry's stamp begins. Its expired entries (seq,
# entry, ...): only those travel.
_EXPIRED_CANONICALS = """
local clock = tonumber(ARGV[1])
local keep = tonumber(ARGV[2])
local day_at = tonumber(ARGV[3])
local out = {}
local flat = redis.call('HGETALL', KEYS[1])
for j = 1, #flat, 2 do
  if keep > 0 and tonumber(string.sub(flat[j + 1], day_at, day_at + 3), 16) * 86400 + 86399 < clock - keep then
    out[#out + 1] = flat[j]
    out[#out + 1] = flat[j + 1]
  end
end
return out
"""


class StaleSnapshot(RuntimeError):
    """A batch was decided on a snapshot that another writer changed: decide it again."""


@dataclass
class Applied:
    """What `apply` did: the sequence number of each verdict recorded, and the documents skipped."""

    seqs: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    """Documents that had a verdict already: none of their writes were applied."""
    stood: dict[str, Link] = field(default_factory=dict)
    """The verdict each of `lost` has, judged at the clock before the batch: the batch's newer documents move the
    clock past it, and the sweep after the batch may remove it, but it is the one its document was given."""
    clock: int = 0
    """The clock once the batch was written (it moves to the batch's newest stamp)."""


@dataclass(frozen=True, slots=True)
class Keep:
    """Each key family's retention in seconds (0: forever), from `RetentionSettings`."""

    verdicts: int
    exact: int
    """Exact keys and group sizes."""
    bands: int
    """A canonical's s:, c: and band entries."""


@dataclass(frozen=True, slots=True)
class Swept:
    """What one bounded sweep did: fields removed, and whether the pass for the clock's day is complete."""

    removed: int
    done: bool


_RETENTION = RetentionSettings()
BUCKET_BITS: int = Settings.model_fields["redis_bucket_bits"].default
"""The buckets per hashed family, 2**bits, unless told (`Settings.redis_bucket_bits`)."""

Client = redis.Redis | RedisCluster
Call = Callable[..., Any]
"""One command for a round trip: called with `client=` a pipeline."""


class StateLost(RuntimeError):
    """The state this store wrote is gone, or a replay into it has not completed: deciding on it would give
    documents second verdicts and link to canonicals not restored yet."""


def connect(url: str, password: str | None = None) -> Client:
    """A client for `url`: `redis://` (or `rediss://`, TLS) is one server, `redis+cluster://` (or
    `rediss+cluster://`) a Redis Cluster reached through any of its nodes: redis-py's cluster client
    routes each command to the master of its slot and follows MOVED and ASK (a failover, a resharding)."""
    scheme, _, rest = url.partition("://")
    if scheme.endswith("+cluster"):
        plain = f"{scheme.removesuffix('+cluster')}://{rest}"
        return _Cluster.from_url(plain, password=password, decode_responses=True, policy_resolver=_EvalByKeys())
    return redis.Redis.from_url(url, password=password, decode_responses=True, command_packer=DirectPacker())


class _EvalByKeys(StaticPolicyResolver):
    """Routes EVAL by its keys. Without a policy for it, redis-py 8.1's cluster client asks a node for the
    keys of every EVAL it sends (COMMAND GETKEYS): a round trip per script call, 30 times the batch's own."""

    def resolve(self, command_name: str) -> CommandPolicies | None:
        if command_name in ("eval", "evalsha"):
            return CommandPolicies(RequestPolicy.DEFAULT_KEYED, ResponsePolicy.DEFAULT_KEYED)
        return super().resolve(command_name)


class _Cluster(RedisCluster):
    """redis-py's cluster client, whose pipelines resolve EVAL's policy as the client does (its
    `pipeline()` does not hand the client's resolver on)."""

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        pipe._policy_resolver = self._policy_resolver
        return pipe


class RedisStateStore:
    """`StateStore` on a Redis server or a Redis Cluster (or a Redis-protocol one)."""

    def __init__(
        self,
        client: Client,
        prefix: str = "dedup:",
        bucket_bits: int = BUCKET_BITS,
        retention: RetentionSettings = _RETENTION,
        restoring: bool = False,
        fresh: Callable[[], None] | None = None,
        band_layout: BandLayout = DEFAULT,
        recorded_seq: Callable[[], int] | None = None,
        relinking: bool = False,
    ) -> None:
        """`restoring`: this is `dedup replay`'s store, which writes while its own checkpoint is there.
        `relinking`: this is `dedup relink`'s store, which writes while a relink's mark (`relink_key`) is there.
        `fresh` is called before an empty state is marked as new, and raises (`StateLost`) where a new
        state is not expected: the workers' asks whether `dedup.links` holds verdicts already.
        `recorded_seq` gives the newest verdict seq on record outside Redis (`dedup.links`): a state whose
        verdict counter is behind it went back (`_check_counter`)."""
        if bucket_bits % 4 or not 4 <= bucket_bits <= 24:
            raise ValueError(f"bucket_bits is {bucket_bits}: a multiple of 4 from 4 to 24 (whole hex digits)")
        self._redis = client
        self._prefix = prefix
        self._bucket_bits = bucket_bits
        self._bucket_hex = bucket_bits // 4
        self.band_layout = band_layout
        self.layout = f"{LAYOUT}/{bucket_bits}" + ("" if band_layout.name == _BANDS_BEFORE else f"/{band_layout.name}")
        """The `{prefix}layout` marker: the key layout, the bucket bits it was written with, and its band layout
        (none written for 4x16, as before layouts were recorded)."""
        key_bits = band_layout.key_bits
        self._band_shift = 6 if key_bits == 16 else max(0, key_bits - bucket_bits)
        """A band key's bucket is `key >> shift`: 16-bit keys in 1,024 buckets of 64 values (layout 2 before band
        layouts, whatever the bucket bits), longer ones in 2**bucket_bits buckets a table (sized for the live
        state as the other families are)."""
        self._band_field = (1 << max(16, self._band_shift)) - 1
        """A band entry's field is `key & this`: the rest of the key below the bucket (16 bits at least: the
        whole of a 16-bit key, as layout 2 wrote it)."""
        flips = band_layout.near(0)[1:]
        self._band_within = sum(1 for f in flips if f >> self._band_shift == 0)
        """How many of a key's low bits a lookup flips inside its own bucket (the script derives those fields)."""
        self._band_across = [f for f in flips if f >> self._band_shift]
        """The flips that move a key to another bucket: one field read there."""
        self._band_names: dict[tuple[str, int], tuple[str, str]] = {}
        """(prefix, middle) of each (language, table)'s bucket names: a lookup makes 136 names a query in
        8x32+p1, a third of its client time as `_tagged` calls."""
        self._clock = f"{prefix}clock"
        self._cursor = f"{prefix}sweep"
        self._oldest = f"{prefix}oldest"
        """Each swept family's oldest stamp, or earlier (`_FAMILIES`' kind, `s` for the canonicals): a pass reads
        no bucket of a family that holds nothing past its retention. Made before the layout marker of a new
        state, moved back by every batch that writes an older stamp, forward by the pass that reads the family;
        a family without one (a state marked before them, a failover) is read by every pass. A key of its own,
        not fields of `sweep`: that is among the singletons whose presence without a marker means an older
        layout, which a store marking the state would then make another store refuse."""
        self._seq = f"{prefix}seq"
        self._vseq = f"{prefix}vseq"
        self._languages = f"{prefix}languages"
        self._layout = f"{prefix}layout"
        self._singletons = (self._seq, self._vseq, self._clock, self._cursor, self._languages)
        """The keys of no slot group but the layout marker (their presence without it: an older layout)."""
        self._layout_checked = False
        self._marker: str | None = None
        """The layout marker as this store found (or made) it: a batch that reads another refuses ("Lost")."""
        self._hex_fields = False
        """The state is of layout 2: its exact keys' fields are hex (`_exact`)."""
        self._entries: _Entries = ENTRIES
        """How the state's s: entries hold a canonical: with its figures (layout 4) or without (2 and 3)."""
        self._fences = [f"{prefix}lock:fence:{{{tag}}}" for tag in _TAG_HEX]
        """One a slot group: the newest lease's epoch, and the mark that the group's keys are there (see "Lost")."""
        self._fence_of = dict(zip(_TAG_HEX, self._fences, strict=True))
        """Each fence key by its slot group's tag."""
        self._models = f"{prefix}models:{{00}}"
        """The embedding models' codes (`n{name}`: code, `c{code}`: name, `#` the last code); slot group 00."""
        self._model_codes: dict[str, str] = {}
        self._model_names: dict[str, str] = {}
        self.checkpoint_key = f"{prefix}replay"
        """An unfinished `dedup replay`'s last restored position; no one else writes while it is there."""
        self._restoring = restoring
        self.relink_key = f"{prefix}relink"
        """A relink's mark, from before it writes the state until its records reached the topics: while it is
        there, the state has verdicts that `dedup.links` does not, and only a relink writes."""
        self._relinking = relinking
        self._fresh = fresh
        self._recorded_seq = recorded_seq
        self._lost = False
        """The layout marker this store saw went missing: it never writes again (`StateLost`)."""
        self._drawn_through = 0
        """The verdict counter as this store last saw it (on starting, with each batch, by its own draws): a
        counter below it means the state went back, whether or not this store drew since."""
        cluster = self._cluster = isinstance(client, RedisCluster)
        if cluster and "{" in prefix:
            raise ValueError(
                f"the Redis prefix {prefix!r} holds a '{{': on Redis Cluster a key is hashed by its first '{{...}}',"
                " so every key would hash by the prefix instead of its bucket's own tag (all on one master, or"
                " one tag's families in different slots); set DEDUP_REDIS_PREFIX without braces"
            )
        self._slot: Callable[[str], int] = (lambda key: key_slot(key.encode())) if cluster else (lambda key: 0)
        """A key's slot; on one server every key is in one (it owns them all), so every group is one call."""
        self.keep = Keep(
            keep_seconds(retention.verdicts_days),
            keep_seconds(retention.exact_days),
            keep_seconds(retention.bands_days),
        )
        self._scripts: list[_Lua] = []
        """Every script of this store: loaded by the first call that finds them missing (`_run`)."""

        def script(source: str) -> _Lua:
            self._scripts.append(_Lua(client, source))
            return self._scripts[-1]

        self._publish, self._fields, self._advance = script(_PUBLISH), script(_FIELDS), script(_ADVANCE)
        self._band_fields = script(_BAND_FIELDS)
        self._at_least, self._drop_entries, self._older = script(_AT_LEAST), script(_DROP_ENTRIES), script(_OLDER)
        self._expire_fields, self._expired_canonicals = script(_EXPIRE_FIELDS), script(_EXPIRED_CANONICALS)
        self._bulk = script(_BULK)
        self._register_model = script(_REGISTER_MODEL)
        self._raise = script(_RAISE)

    @classmethod
    def from_url(
        cls,
        url: str,
        prefix: str = "dedup:",
        password: str | None = None,
        retention: RetentionSettings = _RETENTION,
        bucket_bits: int = BUCKET_BITS,
        band_layout: BandLayout = DEFAULT,
    ) -> RedisStateStore:
        """A store on `url` (see `connect`); the password may also be in the URL."""
        return cls(connect(url, password), prefix, bucket_bits, retention, band_layout=band_layout)

    def close(self) -> None:
        self._redis.close()

    # Keys: every bucket carries a hash tag of 2 hex digits (its slot group), singletons none

    # Key names are made several times for every link a batch writes: each is one f-string, with no number
    # formatted or parsed on the way (`benchmarks/replay_speed.py`: a tenth of a replay's client time was here).

    def _tagged(self, kind: str, tag: int, rest: str) -> str:
        return f"{self._prefix}{kind}:{{{_TAG_HEX[tag % _TAGS]}}}{rest}"

    def _hashed(self, kind: str, digest: str) -> str:
        """The bucket of a hashed item: the first `bucket_hex` digits of its digest, the first two its tag (one
        digit, with 4 bucket bits: the tag is that digit, zero-padded)."""
        bucket = digest[: self._bucket_hex]
        return f"{self._prefix}{kind}:{{{bucket[:2].zfill(2)}}}{bucket[2:]}"

    def _bucket(self, kind: str, item: str) -> str:
        return self._hashed(kind, hashlib.blake2b(item.encode(), digest_size=8).hexdigest())

    def _exact(self, key: str) -> tuple[str, str]:
        """(bucket, field) of an exact key: the bucket's bits of its hash, then 64 more in the field as a signed
        decimal, which a listpack keeps as a 9-byte integer (with 16 bucket bits, two of 20M keys share all
        80 bits with odds of about 2e-10, two of a billion 4e-7). A layout 2 state has 80 bits in 20 hex
        digits there, 22 bytes a field: 27 bytes more a canonical at 10M."""
        if not self._layout_checked:
            self._ensure_layout()  # the field's encoding is the state's
        digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
        hexed = digest.hex()
        if self._hex_fields:
            return self._hashed("x", hexed), hexed[self._bucket_hex : self._bucket_hex + 20]
        return self._hashed("x", hexed), str(int.from_bytes(digest[8:], "little", signed=True))

    def _entries_key(self, bucket: int) -> str:
        """The s: bucket of seqs `bucket * 256` to `bucket * 256 + 255`."""
        return self._tagged("s", bucket, str(bucket))

    def _band_bucket(self, language: str, index: int, bucket: int) -> str:
        return self._tagged("b", bucket, f"{language}:{index}:{bucket}")

    def _band_entries(self, language: str, bands: Sequence[int]) -> list[tuple[str, int]]:
        """(bucket, field) of a canonical's entry in each band table."""
        shift, field_ = self._band_shift, self._band_field
        return [(self._band_bucket(language, index, key >> shift), key & field_) for index, key in enumerate(bands)]

    def _band_lookups(self, language: str, bands: Sequence[int]) -> list[tuple[str, str]]:
        """(bucket, `_BAND_FIELDS` argument) of every bucket a lookup of `bands` reads: in each table the key's
        own (the key and, with probes, its flips inside the bucket), then one for each flip that moves it."""
        shift, field_, across = self._band_shift, self._band_field, self._band_across
        places = []
        for index, key in enumerate(bands):
            names = self._band_names.get((language, index))
            if names is None:
                names = self._band_names[language, index] = (f"{self._prefix}b:{{", f"}}{language}:{index}:")
            head, middle = names
            bucket = key >> shift
            places.append((f"{head}{_TAG_HEX[bucket & 0xFF]}{middle}{bucket}", str(key)))
            for flip in across:
                moved = key ^ flip
                bucket = moved >> shift
                places.append((f"{head}{_TAG_HEX[bucket & 0xFF]}{middle}{bucket}", f"={moved & field_}"))
        return places

    def _fence_key(self, key: str) -> str:
        """The fence key of a bucket's slot group (named by its tag)."""
        tag = key.find("{", len(self._prefix)) + 1
        return self._fence_of[key[tag : tag + 2]]

    def _by_slot(self, keys: Sequence[str]) -> list[list[int]]:
        """Indexes of `keys` grouped by slot, in order of first appearance: one script call each."""
        if not self._cluster:  # one server owns every slot: one group
            return [list(range(len(keys)))] if keys else []
        groups: dict[int, list[int]] = {}
        for index, key in enumerate(keys):
            groups.setdefault(self._slot(key), []).append(index)
        return list(groups.values())

    def _fenced(self, script: _Lua, keys: Sequence[str], args: Sequence[Any], epoch: int, clock: int) -> Call:
        """A writing script's call on keys of one slot: its fence key first, the epoch and clock first."""
        return partial(script, keys=[self._fence_key(keys[0]), *keys], args=[epoch, clock, *args])

    def _run(self, calls: Sequence[Call]) -> list[Any]:
        """One round trip: the calls pipelined (a cluster pipeline sends each node its share). The first
        error raises once every call has run, as Redis's own message (redis-py would prefix it with the
        command, hiding a FENCED); calls that found their script missing run again once it is loaded."""
        if not calls:
            return []
        results = self._pipelined(calls)
        forgotten = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if forgotten:  # a restarted server: those calls ran nowhere, every other one ran once
            for script in self._scripts:
                script.load()
            for i, result in zip(forgotten, self._pipelined([calls[i] for i in forgotten]), strict=True):
                results[i] = result
        for result in results:
            if isinstance(result, redis.ResponseError) and str(result).startswith("LOST "):
                self._lose(str(result).removeprefix("LOST "))
            if isinstance(result, Exception):
                raise result
        return results

    def _pipelined(self, calls: Sequence[Call]) -> list[Any]:
        with self._redis.pipeline(transaction=False) as pipe:
            for call in calls:
                call(client=pipe)
            return list(pipe.execute(raise_on_error=False))

    def _ensure_layout(self) -> None:
        """Refuse a state of another layout; mark an empty one as this layout (once per store)."""
        if self._layout_checked:
            return
        layout_key = self._layout
        layout, *present = self._run(
            [partial(_get, key=layout_key), *(partial(_exists, key=key) for key in self._singletons)]
        )
        if layout is None and any(present) and not any(self._run([partial(_exists, key=k) for k in self._fences])):
            # Keys without the marker, and no lease's fence: a round's unfenced writes (the clock, the counters,
            # the languages) that landed after Redis lost the state under a batch (restarted without its data,
            # flushed). Whatever wrote them, nothing here can be decided on; `clear` takes them out.
            back = [key for key, there in zip(self._singletons, present, strict=True) if there]
            raise StateLost(
                f"the Redis state under prefix {self._prefix!r} holds {', '.join(back)} but no {layout_key} "
                "marker and no lease fence: Redis lost the state under a running batch (restarted without its "
                "data, flushed), or an older version of streams-dedup wrote it. Rebuild it with "
                "`dedup replay --fresh` (it deletes these keys first)"
            )
        if layout is None and any(present):
            raise LayoutMismatch(
                f"the Redis state under prefix {self._prefix!r} was written by an older version of "
                f"streams-dedup (no {layout_key} key): delete its keys (or set another DEDUP_REDIS_PREFIX) "
                "and rebuild it with `dedup replay`"
            )
        config = (layout or "").partition(" ")[0]  # then the state's token, if it was marked with one
        written = f"{_HEX_FIELDS}/12" if config == _HEX_FIELDS else config  # marked before the bucket count was
        kind, bits, bands = [*written.split("/", 2), "", ""][:3]
        bands = bands or _BANDS_BEFORE  # marked before band layouts were
        if layout is not None and kind not in (LAYOUT, _NO_FIGURES, _HEX_FIELDS):
            raise LayoutMismatch(
                f"the Redis state under prefix {self._prefix!r} has layout {layout}, this version reads "
                f"layouts {_HEX_FIELDS}, {_NO_FIGURES} and {LAYOUT}: rebuild it with `dedup replay --fresh` (or "
                "into another DEDUP_REDIS_PREFIX)"
            )
        if layout is not None and bits != str(self._bucket_bits):
            raise LayoutMismatch(
                f"the Redis state under prefix {self._prefix!r} was written with bucket_bits {bits}, this store "
                f"has {self._bucket_bits}: set DEDUP_REDIS_BUCKET_BITS={bits}, or rebuild it with `dedup replay` "
                "under another DEDUP_REDIS_PREFIX"
            )
        if layout is not None and bands != self.band_layout.name:
            raise LayoutMismatch(
                f"the Redis state under prefix {self._prefix!r} was written with band layout {bands}, this store "
                f"has {self.band_layout.name}: set DEDUP_SIMHASH__BANDS={bands}, or rebuild it with `dedup replay` "
                "under another DEDUP_REDIS_PREFIX"
            )
        if layout is None and self._fresh is not None and not self._restoring:
            self._fresh()  # an empty state: new, or lost (Redis restarted without its data) with no one to tell
        fences = self._run([partial(_get, key=key) for key in self._fences])
        missing = [key for key, fence in zip(self._fences, fences, strict=True) if fence is None]
        if layout is not None and 0 < len(missing) < len(self._fences):
            self._lose(missing[0])  # marked, and part of it gone: a master failed over to an empty replica
        if missing:  # a new state, or one no lease ever wrote (every lease publishes to every group)
            self._run([partial(_set_absent, key=key, value=0) for key in missing])
        if layout is not None and not self._restoring:
            self._check_counter()
        if layout is None:
            # An empty state holds nothing old: its first passes read nothing. Before the marker, which lets
            # writers in: every entry ever written here moves its family's stamp back.
            self._run([partial(_hsetnx, key=self._oldest, field=kind, value=_NONE_YET) for kind in _SWEPT])
            layout = f"{self.layout} {secrets.token_hex(6)}"  # this state's own: a rebuilt one has another
            if not self._redis.set(layout_key, layout, nx=True):
                return self._ensure_layout()  # another store marked it meanwhile: its marker is checked
        self._marker = layout
        self._hex_fields = kind == _HEX_FIELDS
        self._entries = ENTRIES if layout.startswith(f"{LAYOUT}/") else _WITHOUT_FIGURES
        self._layout_checked = True

    def clear(self) -> int:
        """Delete the state's keys but the lease's and the replay's checkpoint (`dedup replay --fresh`: a state
        lost in part is rebuilt from nothing); the layout marker last, so that an interrupted clear is still a
        lost state. Each family by its own pattern, its hash tag included, never the bare prefix, which may
        begin another prefix (`dedup:` of `dedup:v:`).
        Returns how many keys went."""
        escaped = re.sub(r"([*?\[\]\\])", r"\\\1", self._prefix)
        removed = sum(self._run([partial(_unlink, key=self._oldest)]))  # first: what is left is read whole
        for family in ("v", "x", "c", "s", "b", "g", "p", "models", "lock:fence"):
            found = list(self._redis.scan_iter(match=f"{escaped}{family}:{{??}}*", count=1000))  # hash-tagged
            for start in range(0, len(found), 1000):
                removed += sum(self._run([partial(_unlink, key=key) for key in found[start : start + 1000]]))
        removed += sum(self._run([partial(_unlink, key=key) for key in (*self._singletons, self.relink_key)]))
        removed += sum(self._run([partial(_unlink, key=self._layout)]))
        self._layout_checked, self._lost, self._drawn_through = False, False, 0
        self._model_codes.clear()
        self._model_names.clear()
        return removed

    def _lose(self, fence: str) -> None:
        """A slot group's fence is gone: Redis Cluster lost part of the state (a master failed over to a replica
        that had not copied it), or all of it went under a batch. Sticky, as a lost marker."""
        self._lost = True
        raise StateLost(
            f"the Redis state under prefix {self._prefix!r} lost keys ({fence} is missing): a Redis Cluster master "
            "failed over to a replica that had not copied it, or Redis was emptied (restarted without its data, "
            "flushed). Nothing is written into it: rebuild it with `dedup replay --fresh` (which deletes what is "
            "left first), then restart this process"
        )

    def _check_counter(self) -> None:
        """Refuse (`StateLost`) a state whose verdict counter is behind a seq on record: Redis restarted on an
        older snapshot (or a backup was restored) while no process that drew since was there to notice
        (`_went_back`). The record is read first: every seq on it was drawn before the counter is read. Not
        sticky: once a replay has rebuilt the state, the check passes and this store goes on. A replay under
        way is left to say so itself (`_check_state`). The counter read is this store's first mark of it."""
        recorded = self._recorded_seq() if self._recorded_seq is not None else 0
        found, replaying = self._run([partial(_get, key=self._vseq), partial(_get, key=self.checkpoint_key)])
        counter = int(found or 0)
        if replaying is None and recorded > counter:
            raise StateLost(
                f"the Redis state under prefix {self._prefix!r} went back: its verdict counter is at"
                f" {counter}, below seq {recorded} on record in the links topic (Redis restarted on an"
                " older snapshot, or a backup was restored). Nothing is decided on it: rebuild it with"
                " `dedup replay --fresh` (the workers wait for it); run Redis with appendfsync always to keep"
                " every write across a restart"
            )
        self._drawn_through = max(self._drawn_through, counter)

    def _went_back(self, top: int) -> None:
        """The verdict counter went back (Redis restarted on a snapshot older than its last writes, a backup
        restored): the verdicts written since are gone and their seqs would be given again. Sticky."""
        self._lost = True
        raise StateLost(
            f"the Redis state under prefix {self._prefix!r} went back: its verdict counter is at {top}, below the"
            f" {self._drawn_through} this process saw (Redis restarted on an older snapshot, or a backup was"
            " restored). Nothing is written into it: rebuild it with `dedup replay --fresh`, then restart this"
            " process; run Redis with appendfsync always to keep every write across a restart"
        )

    def _check_state(self, layout: str | None, replaying: str | None, relinking: str | None) -> None:
        """Refuse to write into a state that is gone, rebuilt since this store began on it, half restored, or
        relinked without its records on the topics yet (`StateLost`), with what to do."""
        if layout is None or self._lost:
            self._lost = True  # what this process read before may be of the lost state: never again here
            raise StateLost(
                f"the Redis state under prefix {self._prefix!r} is gone ({self._layout} is missing): Redis was "
                "emptied (restarted without its data, flushed, or failed over to an empty replica). Nothing is "
                "written into it: rebuild it with `dedup replay`, then restart this process"
            )
        if layout != self._marker:
            self._lost = True  # its model codes, its layout's encodings: what this process knows is of the old one
            raise StateLost(
                f"the Redis state under prefix {self._prefix!r} was rebuilt since this process began on it (its "
                f"marker {self._layout} is {layout!r}, was {self._marker!r}: `dedup replay --fresh`, or a state "
                "written anew). Nothing is written into it from here: restart this process"
            )
        if replaying is not None and not self._restoring:
            raise StateLost(
                f"a `dedup replay` into prefix {self._prefix!r} has not completed ({self.checkpoint_key} is "
                "there): its state is half restored; waiting for it (run `dedup replay` again to complete it)"
            )
        if relinking is not None and not self._relinking:
            raise StateLost(
                f"a `dedup relink` wrote the state under prefix {self._prefix!r} and has not sent its records to the"
                f" topics yet ({self.relink_key} is there): stopped, if it is not running now; waiting for it (run"
                " the same relink again to complete it)"
            )

    def fence(self, lease: Lease) -> int:
        """Publish `lease`'s epoch to the fence key of every slot group, before its holder reads anything
        (`RedisLock(fence=...)` calls this on taking the lock): from then on a write of an older holder
        is refused in every slot. Returns the newest epoch found there before (the lease's or greater: a newer
        holder published first, or the epoch counter went back, and the lock draws again)."""
        self._ensure_layout()
        keys = self._fences
        calls = [  # one call per slot: 256 on a cluster, one on one server (a call per key cost 5% of a batch)
            partial(self._publish, keys=[keys[i] for i in group], args=[lease.epoch]) for group in self._by_slot(keys)
        ]
        return max(int(seen) for seen in self._run(calls))

    def count_past(self, seq: int) -> None:
        """Move the verdict counter past `seq` (never back): a replay that skipped a link it could not restore
        still leaves its seq drawn, or the workers would take the state for one gone back (`_check_counter`)
        and the seq could be given again."""
        self._ensure_layout()
        self._run([partial(self._at_least, keys=[self._vseq], args=[seq])])

    # The clock and retention

    def clock(self) -> int:
        self._ensure_layout()
        return _bounded(self._redis.get(self._clock))

    def advance(self, published_at: int) -> int:
        """Move the clock forward to `published_at` (clamped to the wall clock plus a day); returns the clock."""
        self._ensure_layout()
        return _bounded(self._advance(keys=[self._clock], args=[clamped(published_at, time.time())]))

    def stale(self, keep_s: int, published_at: int, clock: int) -> bool:
        """Whether an entry stamped now with `published_at` is hidden at `clock` under retention `keep_s`."""
        return expired(_day_end(_day(published_at, time.time())), clock, keep_s)

    def verdict_expired(self, stamp: int) -> bool:
        """Whether a verdict stamped `stamp` may be gone: past `verdicts_days` at the clock (a verdict is hidden at
        the end of its stamp's day: this says so no later), or before the sweep's horizon (`_HORIZON`: removed by
        a shorter `verdicts_days` than today's)."""
        self._ensure_layout()
        clock, horizon = self._run([partial(_get, key=self._clock), partial(_hget, key=self._cursor, field=_HORIZON)])
        return verdict_gone(stamp, _bounded(clock), self.keep.verdicts, _int_or_none(horizon))

    def verdict_of(self, doc_id: str) -> Link | None:
        return self.verdicts_of([doc_id])[doc_id]

    def verdicts_of(self, doc_ids: Sequence[str]) -> dict[str, Link | None]:
        """The verdicts of many documents in one round trip (None: not decided, or past its retention)."""
        return _links(self.verdict_entries(doc_ids))

    def verdict_entries(self, doc_ids: Sequence[str], at: int | None = None) -> dict[str, tuple[Link, int] | None]:
        """`verdicts_of`, each verdict with the stamp it ages by (the last second of its day): a batch that
        decides a later document hides what has expired by that document's time (`BatchedState.see`). `at`:
        judged at that clock rather than the stored one."""
        if not doc_ids:
            return {}
        clock, values = self._read([(self._bucket("v", doc_id), doc_id) for doc_id in doc_ids])
        return self._verdict_entries(doc_ids, values, clock if at is None else at)

    def verdicts_at(
        self, doc_ids: Sequence[str]
    ) -> tuple[int, int | None, dict[str, tuple[Link, int] | None], dict[str, Link]]:
        """The clock, the sweep's horizon (`verdict_expired`), the verdicts read at that clock with their stamps
        (`verdict_entries`) and the pending links there are (`pending_of`), in one round trip (a document's p:
        bucket is in its v: bucket's slot: the same script calls)."""
        digests = [hashlib.blake2b(doc_id.encode(), digest_size=8).hexdigest() for doc_id in doc_ids]
        places = [(self._hashed("v", digest), doc_id) for digest, doc_id in zip(digests, doc_ids, strict=True)]
        places += [(self._hashed("p", digest), doc_id) for digest, doc_id in zip(digests, doc_ids, strict=True)]
        clock, (horizon, *values) = self._read(places, partial(_hget, key=self._cursor, field=_HORIZON))
        half = len(doc_ids)
        pending = {
            doc_id: link
            for doc_id, value in zip(doc_ids, values[half:], strict=True)
            if value is not None and (link := self._pending_link(doc_id, value, clock)) is not None
        }
        return clock, _int_or_none(horizon), self._verdict_entries(doc_ids, values[:half], clock), pending

    def pending_of(self, doc_id: str) -> Link | None:
        """The link a batch stopped between its write rounds began recording for `doc_id` (a duplicate, one
        under review): its claims and its group's growth may be in the state, its verdict is not (see
        "Writes"). Its redelivery records that link instead of deciding again from its own claims."""
        clock, (value,) = self._read([(self._bucket("p", doc_id), doc_id)])
        return None if value is None else self._pending_link(doc_id, value, clock)

    def _pending_link(self, doc_id: str, value: str, clock: int) -> Link | None:
        """A pending link as stored, or None past the verdicts' retention. One written before pending links
        had a stamp (no space after 4 digits: a link's fifth character is its content key's) never ages."""
        if value[_DAY_HEX : _DAY_HEX + 1] != " ":
            return _read_link(doc_id, value, self._model_name)
        if expired(_day_end(int(value[:_DAY_HEX], 16)), clock, self.keep.verdicts):
            return None
        return _read_link(doc_id, value[_DAY_HEX + 1 :], self._model_name)

    def _verdict_entries(
        self, doc_ids: Sequence[str], values: Sequence[str | None], clock: int
    ) -> dict[str, tuple[Link, int] | None]:
        entries: dict[str, tuple[Link, int] | None] = dict.fromkeys(doc_ids)
        for doc_id, value in zip(doc_ids, values, strict=True):
            if value is not None:
                stamp = _day_end(int(value[:_DAY_HEX], 16))
                if not expired(stamp, clock, self.keep.verdicts):
                    entries[doc_id] = (_read_verdict(doc_id, value, self._model_name), stamp)
        return entries

    def _field_calls(self, places: Sequence[tuple[str, str]]) -> tuple[list[Call], Callable[[list[Any]], list[Any]]]:
        """HGET of each (hash, field) as one script call per slot, and how to put their answers back in order."""
        groups = self._by_slot([hash_ for hash_, _ in places])
        calls: list[Call] = [
            partial(self._fields, keys=[places[i][0] for i in group], args=[places[i][1] for i in group])
            for group in groups
        ]

        def gather(found: list[Any]) -> list[Any]:
            values: list[Any] = [None] * len(places)
            for group, answers in zip(groups, found, strict=True):
                for index, value in zip(group, answers, strict=True):
                    values[index] = value
            return values

        return calls, gather

    def _read(self, places: Sequence[tuple[str, str]], *also: Call) -> tuple[int, list[Any]]:
        """The clock, and HGET of each (hash, field), in one round trip (a command per slot); the answers of the
        calls `also` sends in that round trip come first."""
        self._ensure_layout()
        calls, gather = self._field_calls(places)
        clock, *found = self._run([partial(_get, key=self._clock), *also, *calls])
        return _bounded(clock), [*found[: len(also)], *gather(found[len(also) :])]

    def _stamp(self, published_at: int | None, clock: int) -> str:
        """The stamp of an entry: the day of its `published_at`, or of the clock."""
        return f"{_day(clock if published_at is None else published_at, time.time()):0{_DAY_HEX}x}"

    def record_verdict(self, link: Link) -> Link:
        seq = self._write([VerdictWrite(link)])[0][0]
        if seq:
            return replace(link, seq=int(seq))
        stood = self.verdict_of(link.doc_id)
        assert stood is not None
        return stood

    def exact_lookup(self, keys: Sequence[str]) -> dict[str, str]:
        return {key: holder for key, (holder, _) in self.exact_entries(keys).items()}

    def exact_entries(self, keys: Sequence[str]) -> dict[str, tuple[str, int]]:
        """`exact_lookup`, each holder with its key's stamp (the last second of its day): a batch that decides a
        later document hides what has expired by that document's time (`BatchedState.see`)."""
        if not keys:
            return {}
        clock, values = self._read([self._exact(key) for key in keys])
        found = {}
        for key, value in zip(keys, values, strict=True):
            if value is not None:
                stamp = _day_end(int(value[:_DAY_HEX], 16))
                if not expired(stamp, clock, self.keep.exact):
                    found[key] = (value[_DAY_HEX:], stamp)
        return found

    def stamp_of(self, published_at: int) -> int:
        """The stamp an entry written now with `published_at` ages by: the last second of its (clamped) day."""
        return _day_end(_day(published_at, time.time()))

    def exact_claim(self, keys: Sequence[str], canonical_id: str, published_at: int) -> dict[str, str]:
        holders = self._write([ClaimWrite(tuple(keys), canonical_id, published_at)])[0][0]
        return dict(zip(keys, holders, strict=True))

    def exact_replace(self, key: str, expected: str, canonical_id: str, published_at: int | None = None) -> bool:
        return bool(self._write([ReplaceWrite(key, expected, canonical_id, published_at)])[0][0])

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        return self.band_candidates_many([(language, tuple(bands))])[0]

    def band_candidates_many(self, queries: Sequence[tuple[str, tuple[int, ...]]]) -> list[list[Canonical]]:
        """`band_candidates` of many (language, bands) queries in two round trips; a canonical past
        its retention (its s: entry's stamp) is none."""
        if not queries:
            return []
        self._ensure_layout()
        places = [self._band_lookups(language, bands) for language, bands in queries]
        flat = [place for query in places for place in query]
        groups = self._by_slot([bucket for bucket, _ in flat])
        head = [self._band_within, self._band_field]
        calls = [
            partial(self._band_fields, keys=[flat[i][0] for i in group], args=[*head, *(flat[i][1] for i in group)])
            for group in groups
        ]
        values: list[str] = [""] * len(flat)
        for group, answers in zip(groups, self._run(calls), strict=True):
            for i, value in zip(group, answers, strict=True):
                values[i] = value
        found = iter(values)
        wanted = [sorted({int(seq) for _ in query for seq in next(found).split()}) for query in places]
        every = sorted({seq for seqs in wanted for seq in seqs})
        if not every:
            return [[] for _ in queries]
        clock, values = self._read([(self._entries_key(seq // 256), str(seq)) for seq in every])
        entries = dict(zip(every, values, strict=True))
        results = []
        for (language, _), seqs in zip(queries, wanted, strict=True):
            candidates = []
            for seq in seqs:
                entry = entries[seq]
                if entry is None:  # a seq leaves its band entries with its s: entry; should one stay, it is none
                    continue
                stamp = _day_end(self._entries.day(entry))
                if not expired(stamp, clock, self.keep.bands):
                    simhash, figures, doc_id = self._entries.read(entry)
                    candidates.append(Canonical(doc_id, simhash, language, seq, stamp, figures))
            results.append(candidates)
        return results

    def add_canonical(
        self,
        canonical_id: str,
        simhash: int,
        language: str,
        bands: Sequence[int],
        published_at: int,
        figures: int = 0,
    ) -> None:
        self._write([CanonicalWrite(canonical_id, simhash, language, tuple(bands), published_at, figures)])

    @property
    def keeps_figures(self) -> bool:
        """Whether the state's canonicals keep their figures (layout 4; a state of layout 2 or 3 keeps none, and
        its canonicals are checked against nothing, made in this batch or before)."""
        self._ensure_layout()
        return self._entries is ENTRIES

    def replace_verdict(self, link: Link, expected: Link) -> bool:
        current = self.verdict_of(link.doc_id)
        if current != expected:
            return False
        assert current is not None
        return bool(self._write([ReplaceVerdictWrite(link, current)])[0][0])

    def remove_canonical(self, canonical_id: str, language: str, bands: Sequence[int]) -> None:
        self._write([RemoveCanonicalWrite(canonical_id, language, tuple(bands))])

    def grow_group(self, canonical_id: str, published_at: int) -> int:
        return int(self._write([GrowWrite(canonical_id, 1, published_at)])[0][0]) + 1

    def shrink_group(self, canonical_id: str) -> int:
        return int(self._write([GrowWrite(canonical_id, -1, 0)])[0][0]) + 1

    def group_size(self, canonical_id: str) -> int:
        return self.group_sizes([canonical_id])[canonical_id]

    def group_sizes(self, canonical_ids: Sequence[str]) -> dict[str, int]:
        return {canonical_id: size for canonical_id, (size, _) in self.group_entries(canonical_ids).items()}

    def group_entries(self, canonical_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """`group_sizes`, each with the group's stamp (the last second of its latest member's day; -1 for a
        canonical alone): a batch that decides a later document sees a group expired by then (`BatchedState.see`)."""
        if not canonical_ids:
            return {}
        clock, values = self._read([(self._bucket("g", canonical_id), canonical_id) for canonical_id in canonical_ids])
        groups = {}
        for canonical_id, value in zip(canonical_ids, values, strict=True):
            members, day = divmod(int(value or 0), _GROUP_DAY)
            stamp = _day_end(day)
            groups[canonical_id] = (
                (1, -1) if not members or expired(stamp, clock, self.keep.exact) else (members + 1, stamp)
            )
        return groups

    # Batches

    def apply(
        self,
        writes: Sequence[Write],
        fence: Lease,
        exact: bool = False,
        standing: Sequence[tuple[str, str]] = (),
        mark: bool = True,
        pending: Collection[str] = (),
        expired_read: Mapping[str, int | None] | None = None,
    ) -> Applied:
        """Carry out a batch's buffered writes, fenced by `fence`, slot by slot (see the module's "Writes").

        `writes` is a sequence of per-document groups, each ending with the document's
        `VerdictWrite` (the cascade records a verdict last) or, from a relink, its
        `ReplaceVerdictWrite`: a replacement whose document's verdict is no longer the one
        it was planned on is `StaleSnapshot`, whatever `exact` says. The lease must still be
        ours, or `LeaseLost`; a document that has a verdict by now (an agent that read without
        the lease, a redelivery) has its whole group dropped, so a lost race never makes a
        canonical, claims a key or grows a group; with `exact` (a batch decided entirely under
        the lease) that is `StaleSnapshot` instead, since later documents of the batch may have
        been decided against it. A document linked to one that is no canonical by now (a relink
        linked it back) is `StaleSnapshot` too: the batch was resolved on a snapshot read before
        that; one whose verdict has passed its retention is still the canonical its exact keys
        name. A write refused by a slot's fence (a newer lease holder published there) is
        `LeaseLost`: what was written before it is completed by the batch's redelivery.

        The clock moves to the batch's newest stamp first; a write without a `published_at` is
        stamped with that clock. `standing`: (canonical, member) of the batch's documents whose link
        stood already when it was read (redelivered): their group markers, if a crash left any, go.
        With `mark` (a batch decided from the state, not a replay of links decided already)
        the link of each linked document is left pending until its verdict is recorded ("Writes").
        `pending`: the documents of the batch read with a pending link (`verdicts_at`): it goes once
        their verdict stands (recorded now, or found standing); one decided under another id (other
        content: a new version) or passed on to a later stage keeps it for its redelivery.
        `expired_read`: the documents whose verdict the batch read and found expired by their own time
        (`BatchedState.verdict_of`), with that verdict's seq: decided afresh, their writes go on while that
        very verdict is the one stored; another one recorded meanwhile is a lost race, as for any document.
        """
        self._ensure_layout()
        groups = _by_document(writes)
        if not groups:
            if pending:
                pending = [doc_id for doc_id, link in self.verdicts_of(list(pending)).items() if link is not None]
            if standing or pending:
                self._settle(standing, fence.epoch, 0, pending)
            return Applied()
        applied = Applied()
        closing = {doc_id: group[-1] for doc_id, group in groups if doc_id is not None}
        replacing = {d: w.expected for d, w in closing.items() if isinstance(w, ReplaceVerdictWrite)}
        targets = {w.link.canonical_id for w in closing.values()} - closing.keys()
        docs = [*closing, *targets, *(doc_id for doc_id in pending if doc_id not in closing and doc_id not in targets)]
        calls, gather = self._field_calls([(self._bucket("v", doc_id), doc_id) for doc_id in docs])
        marks = [
            partial(_get, key=k)
            for k in (fence.key, self._clock, self._layout, self.checkpoint_key, self._vseq, self.relink_key)
        ]
        held, clock, layout, replaying, counter, relinking, *found = self._run([*marks, *calls])
        if held != fence.token:
            raise LeaseLost(f"lease {fence.key} expired before the batch was written")
        self._check_state(layout, replaying, relinking)
        if int(counter or 0) < self._drawn_through:
            self._went_back(int(counter or 0))
        self._drawn_through = int(counter or 0)
        clock = _bounded(clock)
        stored = _links(self._verdict_entries(docs, gather(found), clock))
        decided = {doc_id: stored[doc_id] for doc_id in closing}
        for doc_id, seq in (expired_read or {}).items():
            if (link := decided.get(doc_id)) is not None and link.seq == seq:
                decided[doc_id] = None
        for doc_id, expected in replacing.items():
            if decided.pop(doc_id) != expected:
                raise StaleSnapshot(f"the verdict of {doc_id} changed since the relink was planned")
        applied.stood = {doc_id: link for doc_id, link in decided.items() if link is not None}
        applied.lost = list(applied.stood)
        skipped = set(applied.lost)
        settled = [*standing, *_settled(groups, decided)]
        unpending = [d for d in pending if d in skipped or (d not in closing and stored[d] is not None)]
        if settled or unpending:
            self._settle(settled, fence.epoch, clock, unpending)
        if applied.lost and exact:
            raise StaleSnapshot(f"{len(applied.lost)} documents were decided meanwhile, e.g. {applied.lost[0]}")
        # A link is only ever to a canonical. One found on a snapshot read without the lease may have
        # stopped being one since (a relink linked it back into another group): decide it again. A target
        # decided later in the batch is judged as stored: deciding it at its own time saw this link (its group
        # may have expired by then, as `dedup run` has it), and refusing the batch would refuse it on every retry.
        before: set[str] = set()
        for doc_id, write in closing.items():
            target = write.link.canonical_id
            before.add(doc_id)
            if doc_id in skipped or target == doc_id:
                continue
            now = closing[target].link if target in before and target not in skipped else stored[target]
            if now is not None and not now.verdict.canonical:
                raise StaleSnapshot(f"{doc_id} was linked to {target}, which is no canonical any more")
        stamps = [p for _, group in groups for p in map(_published_at, group) if p is not None]
        applied.clock = max(clock, clamped(max(stamps), time.time()) if stamps else 0)  # clamped: monotonic
        kept = [(doc_id, group) for doc_id, group in groups if doc_id not in skipped]
        ordered = [write for _, group in kept for write in group]
        closers: list[int | None] = []
        # Each document's writes are judged at the clock it was decided at (its verdict's stamp, `BatchedState.see`),
        # not at the batch's newest: a group live at a document's time, its growth counted from nothing because a
        # later document of the batch moved the clock past the group's stamp, made other verdicts than dedup run.
        clocks: list[int] = []
        at, wall = clock, time.time()
        for doc_id, group in kept:
            closers += [len(closers) + len(group) - 1 if doc_id is not None else None] * len(group)
            last = group[-1]
            if doc_id is not None and isinstance(last, _VERDICTS) and last.link.published_at is not None:
                at = max(at, clamped(last.link.published_at, wall))
            clocks += [min(at, applied.clock)] * len(group)
        links = [w.link for d, w in closing.items() if d not in skipped and isinstance(w, VerdictWrite)] if mark else []
        marked = [link for link in links if not link.verdict.canonical]
        read = [doc_id for doc_id in pending if doc_id in closing and doc_id not in skipped]
        try:
            results, applied.clock = self._write(ordered, fence.epoch, applied.clock, closers, (marked, read), clocks)
        except redis.ResponseError as exc:
            if str(exc).startswith("FENCED"):
                raise LeaseLost(f"lease {fence.key} was taken by a newer holder while the batch was written") from None
            raise
        raced = []
        for write, result in zip(ordered, results, strict=True):
            if isinstance(write, _VERDICTS):
                if result:
                    applied.seqs[write.link.doc_id] = int(result)
                elif isinstance(write, VerdictWrite):  # decided meanwhile by a writer without the lease
                    raced.append(write.link.doc_id)
        if raced:
            found = self.verdict_entries(raced, at=clock)
            applied.stood.update((doc_id, entry[0]) for doc_id, entry in found.items() if entry is not None)
            applied.lost += raced
        return applied

    def _older_stamps(
        self,
        writes: Sequence[Write],
        verdicts: Sequence[int],
        exact_keys: Sequence[int],
        grows: Sequence[int],
        registering: Sequence[int],
        pending: Sequence[Link],
    ) -> list[Call]:
        """The call that moves each family's oldest stamp back to the oldest this batch writes (none where the
        batch writes no stamp of its own: an entry stamped with the clock is never older than one there)."""
        times = {
            "v": [t for i in verdicts if (t := writes[i].link.published_at) is not None],  # type: ignore[union-attr]
            "x": [t for i in exact_keys if (t := writes[i].published_at) is not None],  # type: ignore[union-attr]
            "g": [writes[i].published_at for i in grows if writes[i].count > 0],  # type: ignore[union-attr]
            "s": [w.published_at for i in registering if isinstance(w := writes[i], CanonicalWrite)],
            "p": [t for link in pending if (t := link.published_at) is not None],
        }
        wall = time.time()
        args = [part for kind, seen in times.items() if seen for part in (kind, _day(min(seen), wall))]
        return [partial(self._older, keys=[self._oldest], args=args)] if args else []

    def _settle(self, members: Sequence[tuple[str, str]], epoch: int, clock: int, pending: Sequence[str] = ()) -> None:
        """Take out the group markers of (canonical, member) pairs whose member's link stands: a batch that
        stopped between its verdicts and its group sizes (round 6 of `_write`) counted the growth and left
        the marker. A marker that is not there costs an HDEL of nothing. And the pending links of `pending`,
        documents whose verdict stands."""
        bulk = _Bulk(self)
        for canonical_id, member in members:
            bulk.add(self._bucket("g", canonical_id), "M", (_marker(canonical_id, member),))
        for doc_id in pending:
            bulk.add(self._bucket("p", doc_id), "D", (doc_id,))
        try:
            self._sink(bulk.calls(epoch, clock))
        except redis.ResponseError as exc:
            if str(exc).startswith("FENCED"):
                raise LeaseLost("the lease was taken by a newer holder while the batch was written") from None
            raise

    def _write(
        self,
        writes: Sequence[Write],
        epoch: int = 0,
        clock: int | None = None,
        closers: Sequence[int | None] | None = None,
        pending: tuple[Sequence[Link], Sequence[str]] = ((), ()),
        clocks: Sequence[int] | None = None,
    ) -> tuple[list[Any], int]:
        """Carry out `writes` in rounds, each a pipeline of one-slot scripts fenced by `epoch` (0: unfenced):
        the registrations held and the seqs to draw; exact keys and the c: entries of new canonicals; their
        s: and band entries; verdicts; group sizes. Returns what each write returns on its own (a claim its
        holders, a verdict its seq or 0, a canonical its seq, a group its members) and the clock. With
        `closers` (a batch: the index of the verdict closing each write's document) the clock moves to
        `clock` first, and a group grows only for a verdict recorded now. `pending`: the links to leave
        pending from the first round to the last (written with the seqs), and the documents whose pending
        link from before goes in the last. `clocks`: the clock each write's document was decided at, at which
        its exact keys and group are judged (expired or not; None: all at `clock`)."""
        self._ensure_layout()
        results: list[Any] = [None] * len(writes)
        exact_keys: list[int] = []
        registering: list[int] = []
        verdicts: list[int] = []
        grows: list[int] = []
        for i, w in enumerate(writes):  # one pass: each round goes through its own writes only
            if isinstance(w, _VERDICTS):
                verdicts.append(i)
            elif isinstance(w, (ClaimWrite, ReplaceWrite)):
                exact_keys.append(i)
            elif isinstance(w, GrowWrite):
                grows.append(i)
            else:
                registering.append(i)
        named = {i: writes[i].canonical_id for i in registering}  # type: ignore[union-attr]
        drawn = [i for i in verdicts if not writes[i].link.seq]  # type: ignore[union-attr]
        # 1: the c: entries of the canonicals registered or removed, the verdict seqs drawn (and the clock)
        calls, gather = self._field_calls([(self._bucket("c", doc_id), doc_id) for doc_id in named.values()])
        tail = [partial(_incrby, key=self._vseq, amount=len(drawn))] if drawn else []
        if clock is None:
            tail.append(partial(_get, key=self._clock))
        marks, unmarks = pending
        bulk = _Bulk(self)
        pended_in = [self._bucket("p", link.doc_id) for link in marks]
        for bucket, link in zip(pended_in, marks, strict=True):
            bulk.add(bucket, "p", (link.doc_id, f"{self._stamp(link.published_at, clock or 0)} {self._encoded(link)}"))
        pended = [call for call, _ in bulk.calls(epoch, clock or 0)]
        older = self._older_stamps(writes, verdicts, exact_keys, grows, registering, marks)
        found = self._run([*older, *pended, *calls, *tail])[len(older) + len(pended) :]
        if clock is None:
            clock = _bounded(found.pop())
        verdict_seqs = {}
        if drawn:
            top = int(found.pop())
            if top - len(drawn) < self._drawn_through:
                self._went_back(top)
            self._drawn_through = top
            verdict_seqs = dict(zip(drawn, range(top - len(drawn) + 1, 1 << 62), strict=False))
        old = {i: int(value) for i, value in zip(registering, gather(found), strict=True) if value is not None}
        # 2: their s: entries, and seqs for the canonicals registered nowhere
        fresh = [i for i in registering if isinstance(writes[i], CanonicalWrite) and i not in old]
        calls, gather = self._field_calls([(self._entries_key(seq // 256), str(seq)) for seq in old.values()])
        found = self._run([*calls, *([partial(_incrby, key=self._seq, amount=len(fresh))] if fresh else [])])
        new = dict(zip(fresh, range(int(found.pop()) - len(fresh) + 1, 1 << 62), strict=False)) if fresh else {}
        held: dict[int, int] = {}
        """Canonicals registered under a live entry of the same fingerprint (their band entries are written
        again where missing: a batch applied again), and removals: the seq they hold."""
        replaced: dict[int, tuple[int, int]] = {}
        """Canonicals registered over a live entry of another fingerprint (the id reused for another text once its
        verdict expired): that entry's seq and fingerprint, taken out as the id is registered anew
        (`SqliteStateStore.add_canonical`)."""
        dead = []
        for (i, seq), entry in zip(old.items(), gather(found), strict=True):
            write = writes[i]
            if isinstance(write, RemoveCanonicalWrite):
                held[i] = seq
            elif entry is not None and not expired(_day_end(self._entries.day(entry)), clock, self.keep.bands):
                simhash = self._entries.read(entry)[0]
                if simhash == write.simhash:  # type: ignore[union-attr]
                    results[i] = held[i] = seq
                else:
                    replaced[i] = (seq, simhash)
                    dead.append(i)
            else:
                dead.append(i)  # its entry expired (or a crash left it unwritten): registered again
        if dead:
            last = int(self._redis.incrby(self._seq, len(dead)))
            new.update(zip(dead, range(last - len(dead) + 1, last + 1), strict=True))
        # 3: exact keys, the c: entries of new canonicals (compare-and-set), the counter past given verdict seqs
        sinks: list[tuple[Call, Callable[[Any], None]]] = []
        moved = [clock]
        if closers is not None:
            sinks.append((partial(self._advance, keys=[self._clock], args=[clock]), moved.append))
        given = [seq for i in verdicts if (seq := writes[i].link.seq)]  # type: ignore[union-attr]
        if given:
            sinks.append((partial(self._at_least, keys=[self._vseq], args=[max(given)]), _ignore))
        stamps: dict[int | None, str] = {}
        """The stamp of each `published_at` of the batch (a document's writes share theirs)."""

        def stamp_of(published_at: int | None) -> str:
            stamp = stamps.get(published_at)
            if stamp is None:
                stamp = stamps[published_at] = self._stamp(published_at, clock)
            return stamp

        bulk = _Bulk(self)
        for i in exact_keys:  # claims and replacements share the x: buckets: in the order they came
            bulk.at(clocks[i] if clocks is not None else None)
            match writes[i]:
                case ClaimWrite(keys, canonical_id, published_at):
                    holders: list[Any] = [None] * len(keys)
                    results[i] = holders
                    holder = stamp_of(published_at) + canonical_id
                    for k, key in enumerate(keys):
                        bucket, field_ = self._exact(key)
                        bulk.add(bucket, "c", (field_, holder), holders, k)
                case ReplaceWrite(key, expected, canonical_id, published_at):
                    bucket, field_ = self._exact(key)
                    stamp = "" if published_at is None else stamp_of(published_at)
                    bulk.add(bucket, "r", (field_, expected, canonical_id, stamp), results, i)
        for i in new:  # c: buckets
            canonical_id = named[i]
            bulk.add(self._bucket("c", canonical_id), "g", (canonical_id, old.get(i, ""), new[i]), results, i)
        self._sink([*sinks, *bulk.calls(epoch, clock)])
        sinks.clear()
        for i in new:
            if not results[i]:
                raise StaleSnapshot(f"{named[i]} was taken out of the canonicals while it was registered")
        # 4: s: and band entries of the canonicals registered now (or again), those of the removed taken out;
        # in each slot the removed s: entries first, then the entries, the band entries added, those taken out
        bulk = _Bulk(self)
        entries: list[tuple[str, str, tuple[Any, ...]]] = []
        adding: list[tuple[str, str, tuple[Any, ...]]] = []
        dropping: list[tuple[str, str, tuple[Any, ...]]] = []
        languages = set()
        for i in registering:
            write = writes[i]
            if isinstance(write, CanonicalWrite) and (results[i] == new.get(i) or i in held):
                seq = str(results[i])
                stamp = stamp_of(write.published_at)
                entry = self._entries.write(write.simhash, stamp, write.figures, write.canonical_id)
                entries.append((self._entries_key(results[i] // 256), "e", (seq, entry)))
                adding += [(key, "b", (field_, seq)) for key, field_ in self._band_entries(write.language, write.bands)]
                if i in replaced:  # the first text's entries (its band entries in another language read as none)
                    first, simhash = replaced[i]
                    bulk.add(self._entries_key(first // 256), "D", (str(first),))
                    first_bands = self._band_entries(write.language, self.band_layout.keys(simhash))
                    dropping += [(key, "B", (field_, str(first))) for key, field_ in first_bands]
                languages.add(write.language)
            elif isinstance(write, RemoveCanonicalWrite) and i in held:
                seq = str(held[i])
                entries_ = self._band_entries(write.language, write.bands)
                dropping += [(key, "B", (field_, seq)) for key, field_ in entries_]
                bulk.add(self._entries_key(held[i] // 256), "D", (seq,))
        for key, code, args in (*entries, *adding, *dropping):
            bulk.add(key, code, args)
        # ... and the groups a batch's members grow, each once (its marker), before their verdicts: a crash
        # between the verdicts and round 6 leaves no group short, where a relink could then link its canonical
        # back (a chain); the growth of a verdict not recorded in 5 is undone in 6
        marked: dict[int, str] = {}
        for i in grows:
            write = writes[i]
            closer = closers[i] if closers is not None else None
            if closer is not None and write.count > 0:  # type: ignore[union-attr]
                canonical = write.canonical_id  # type: ignore[union-attr]
                marked[i] = _marker(canonical, writes[closer].link.doc_id)  # type: ignore[union-attr]
                day = _day(write.published_at, time.time())  # type: ignore[union-attr]
                args = (marked[i], canonical, write.count, day)  # type: ignore[union-attr]
                bulk.at(clocks[i] if clocks is not None else None)
                bulk.add(self._bucket("g", canonical), "m", args, results, i)
        sinks += bulk.calls(epoch, clock)
        if languages:
            sinks.append((partial(_hset, key=self._languages, mapping=dict.fromkeys(sorted(languages), 1)), _ignore))
        self._sink(sinks)
        sinks.clear()
        # 5: the removed canonicals' c: entries, then verdicts: each first-writer-wins in its own slot
        bulk = _Bulk(self)
        for i in registering:  # c: buckets
            if i in held and isinstance(writes[i], RemoveCanonicalWrite):
                bulk.add(self._bucket("c", named[i]), "u", (named[i], held[i]))
        for i in verdicts:  # v: buckets
            match writes[i]:
                case VerdictWrite(link):
                    args = self._verdict_args(link, link.seq or verdict_seqs[i], stamp_of(link.published_at))
                    bulk.add(self._bucket("v", link.doc_id), "v", args, results, i)
                case ReplaceVerdictWrite(link, expected):
                    args = self._verdict_args(link, link.seq or verdict_seqs[i], stamp_of(link.published_at))
                    args = (*args, self._encoded(expected), _verdict_value(expected, expected.model or ""))
                    bulk.add(self._bucket("v", link.doc_id), "V", args, results, i)
        self._sink(bulk.calls(epoch, clock))
        # 6: group sizes, once the verdict that makes a member is recorded: the markers of 4 taken out (the
        # growth undone for a verdict not recorded), the other growths and the shrinks made. A member's shrink
        # comes only now (made early, a crash before its verdict would leave the group short while the member
        # still links to it), marked so that the round sent again shrinks once; 7 takes its marker out.
        bulk = _Bulk(self)
        leaving: list[tuple[str, str]] = []
        for i in grows:
            write = writes[i]
            assert isinstance(write, GrowWrite)
            bulk.at(clocks[i] if clocks is not None else None)
            closer = closers[i] if closers is not None else None
            bucket = self._bucket("g", write.canonical_id)
            if i in marked:
                if closer is not None and results[closer]:
                    bulk.add(bucket, "M", (marked[i],))
                else:
                    bulk.add(bucket, "x", (marked[i], write.canonical_id, write.count))
                    results[i] = 0
            elif closer is not None and not results[closer]:
                results[i] = 0
            elif closer is not None and write.count < 0:
                marker = _marker(write.canonical_id, writes[closer].link.doc_id, leaving=True)  # type: ignore[union-attr]
                bulk.add(bucket, "m", (marker, write.canonical_id, write.count, 0), results, i)
                leaving.append((bucket, marker))
            else:
                day = _day(write.published_at, time.time()) if write.count > 0 else 0
                bulk.add(bucket, "n", (write.canonical_id, write.count, day), results, i)
        for bucket, link in zip(pended_in, marks, strict=True):
            bulk.add(bucket, "D", (link.doc_id,))
        for doc_id in unmarks:
            bulk.add(self._bucket("p", doc_id), "D", (doc_id,))
        self._sink(bulk.calls(epoch, clock))
        if leaving:  # 7: once 6 is answered, never sent again; a crash before leaves a marker that only ever
            bulk = _Bulk(self)  # stops a later shrink of the same member (a group one too many), never a growth
            for bucket, marker in leaving:
                bulk.add(bucket, "M", (marker,))
            self._sink(bulk.calls(epoch, clock))
        return results, _bounded(max(moved))

    def _verdict_args(self, link: Link, seq: int, stamp: str) -> tuple[Any, ...]:
        """A verdict item's arguments: doc_id, stamp, the encoded verdict, its seq."""
        return (link.doc_id, stamp, self._encoded(link), seq)

    # Embedding models by code: a verdict of stage 4 names its model (`BAAI/bge-m3@` and a 40-digit commit,
    # 52 bytes) in every canonical's verdict; a code from a registry in Redis takes 2 or 3.

    def _encoded(self, link: Link) -> str:
        """`link` as stored, its model by code (registered on first use)."""
        return _verdict_value(link, _CODED + self._model_code(link.model) if link.model else "")

    def _model_code(self, name: str) -> str:
        code = self._model_codes.get(name)
        if code is None:
            code = str(self._run([partial(self._register_model, keys=[self._models], args=[name])])[0])
            self._model_codes[name], self._model_names[code] = code, name
        return code

    def _model_name(self, code: str) -> str:
        name = self._model_names.get(code)
        if name is None:  # registered by another process since: learn every code there is
            registry = self._redis.hgetall(self._models)
            self._model_names.update((k[1:], v) for k, v in registry.items() if k.startswith("c"))
            self._model_codes.update((v, k) for k, v in self._model_names.items())
            name = self._model_names.get(code)
            if name is None:
                raise StateLost(
                    f"a verdict under prefix {self._prefix!r} names model code {code}, which {self._models} "
                    "does not hold: the state is damaged; rebuild it with `dedup replay`"
                )
        return name

    def _sink(self, sinks: list[tuple[Call, Callable[[Any], None]]]) -> None:
        """Run the calls in one round trip, each answer to its sink; empties `sinks`."""
        for (_, sink), answer in zip(sinks, self._run([call for call, _ in sinks]), strict=True):
            sink(answer)
        sinks.clear()

    # The sweep: by bucket, never by LRU

    def expire(self, limit: int = 10_000) -> int:
        """Remove up to `limit` entries past their retention (already invisible to every read): verdicts,
        exact keys, group sizes, and canonicals (a canonical's s:, c: and band entries count as one).
        Returns how many it removed; 0 when the pass for the clock's day is complete."""
        return self.sweep(limit).removed

    def sweep(self, limit: int, fence: Lease | None = None, deadline: float | None = None) -> Swept:
        """`expire`, bounded in time too: it stops at the first step that ends past `deadline`
        (`time.monotonic()`; at least one step is taken, so a pass always moves on), and fenced by `fence`
        when given (a sweep run under the registration lease stops once the lease is lost).

        A pass reads every bucket once, in order: v:, x:, g:, p: (2**bucket_bits each), then the s: buckets
        of every seq given out; each step removes what it found expired and moves the cursor
        (`{prefix}sweep`, in Redis: another worker or a restart resumes there). A pass starts when the
        clock has moved into a day after the one the last pass started on; a family kept forever is
        skipped, and so is one whose oldest stamp (`{prefix}oldest`) is within its retention. A stamp
        missed there (a batch racing the read's start, a failover) only delays its entry's removal until
        the family's recorded oldest stamp expires too; with every family kept forever there is no pass.
        """
        self._ensure_layout()
        removed = 0
        try:
            while removed < limit:
                place = self._sweep_position(fence)
                if place is None:
                    return Swept(removed, True)
                if place[0] < 0:
                    return Swept(removed, False)
                removed += self._sweep_step(*place, limit - removed, fence.epoch if fence else 0)
                if deadline is not None and time.monotonic() >= deadline:
                    break
        except redis.ResponseError as exc:
            if str(exc).startswith("FENCED"):
                return Swept(removed, False)
            raise
        return Swept(removed, self._sweep_position(fence) is None)

    def _sweep_position(self, fence: Lease | None) -> tuple[int, int, int] | None:
        """Where the sweep goes on, where its pass ends, and the clock: the cursor, 0 for a new pass once the
        clock is in a later day than the last pass began on; None when the pass for today is complete
        (a position of -1: the lease is lost)."""
        if not (self.keep.verdicts or self.keep.exact or self.keep.bands):
            return None
        clock, (day, at), seq, held = self._run(
            [
                partial(_get, key=self._clock),
                partial(_hmget, key=self._cursor, fields=["day", "at"]),
                partial(_get, key=self._seq),
                partial(_get, key=fence.key if fence else self._clock),
            ]
        )
        if fence is not None and held != fence.token:
            return -1, 0, 0
        clock = _bounded(clock)
        end = len(_FAMILIES) * 16**self._bucket_hex + int(seq or 0) // 256 + 1
        if at is not None and int(at) < end:
            return int(at), end, clock
        today = clock // DAY_S
        if day is not None and int(day) >= today:
            if at is not None:
                self._redis.hdel(self._cursor, "at")
            return None
        self._redis.hset(self._cursor, mapping={"day": today, "at": 0, "begun": -1})
        return 0, end, clock

    def _sweep_step(self, at: int, end: int, clock: int, limit: int, epoch: int) -> int:
        """Sweep the buckets at cursor position `at` (`end` ends the pass): hash buckets of one family (up
        to `_SWEEP_BUCKETS`, `_SWEEP_FIELDS` fields, a call per run of one slot), or one s: bucket. Returns
        how many entries it removed."""
        per_family = 16**self._bucket_hex
        family = min(at // per_family, len(_FAMILIES))  # the s: buckets, past the hash families, are one family
        keep = getattr(self.keep, _FAMILIES[family][2]) if family < len(_FAMILIES) else self.keep.bands
        after = (family + 1) * per_family if family < len(_FAMILIES) else end
        if not keep:  # kept forever: on to the next family
            self._redis.hset(self._cursor, "at", after)
            return 0
        if at == family * per_family and self._nothing_expired(at, _SWEPT[family], clock, keep):
            self._redis.hset(self._cursor, "at", after)
            return 0
        if family >= len(_FAMILIES):
            return self._sweep_canonicals(at, at - len(_FAMILIES) * per_family, limit, epoch, clock)
        kind, stamp_in, _ = _FAMILIES[family]
        if kind == "v":  # before it removes any: a verdict it may remove is one `verdict_expired` says may be gone
            self._run([partial(self._raise, keys=[self._cursor], args=[_HORIZON, clock - keep])])
        first = at % per_family
        buckets = [
            self._hashed(kind, f"{b:0{self._bucket_hex}x}")
            for b in range(first, min(per_family, first + _SWEEP_BUCKETS))
        ]
        removed, done, budget = 0, 0, _SWEEP_FIELDS
        for run in _runs(buckets, self._slot):
            args = [keep, stamp_in, limit - removed, budget]
            gone, finished, read = self._run([self._fenced(self._expire_fields, run, args, epoch, clock)])[0]
            removed, done, budget = removed + int(gone), done + int(finished), budget - int(read)
            if finished < len(run) or budget <= 0 or removed >= limit:
                break
        self._redis.hset(self._cursor, "at", at + done)
        return removed

    def _nothing_expired(self, at: int, kind: str, clock: int, keep: int) -> bool:
        """At a step on a family's first bucket (`at`): whether the pass skips the family, its oldest stamp
        within its retention (nothing to remove). Otherwise, unless its read began already (a step that did
        not finish the bucket), the read to come leaves nothing older than what is within the retention at
        `clock`: the family's oldest stamp from now (a batch during the read moves it back again)."""
        begun, oldest = self._run(
            [partial(_hget, key=self._cursor, field="begun"), partial(_hget, key=self._oldest, field=kind)]
        )
        if begun == str(at):
            return False
        if oldest is not None and not expired(_day_end(int(oldest)), clock, keep):
            return True
        self._run(
            [
                partial(_hset, key=self._oldest, mapping={kind: max(0, (clock - keep) // DAY_S)}),
                partial(_hset, key=self._cursor, mapping={"begun": at}),
            ]
        )
        return False

    def _sweep_canonicals(self, at: int, bucket: int, limit: int, epoch: int, clock: int) -> int:
        """Remove up to `limit` expired canonicals of s: bucket `bucket`, with their c: and band entries
        in every language registered (the s: entry does not name its language: that would cost bytes
        in every canonical): band and c: entries first, the s: entry last, so that a sweep stopped
        between them finds the canonical again. The cursor stays on the bucket while expired
        canonicals are left in it."""
        s_bucket = self._entries_key(bucket)
        flat, languages = self._run(
            [
                partial(self._expired_canonicals, keys=[s_bucket], args=[clock, self.keep.bands, self._entries.day_at]),
                partial(_hkeys, key=self._languages),
            ]
        )
        gone = list(zip(flat[::2], flat[1::2], strict=True))[:limit]
        bulk = _Bulk(self)
        dropping: list[tuple[str, str, tuple[Any, ...]]] = []
        for seq, entry in gone:
            simhash, _, doc_id = self._entries.read(entry)
            keys = self.band_layout.keys(simhash)
            for language in sorted(languages):
                dropping += [(key, "B", (field_, seq)) for key, field_ in self._band_entries(language, keys)]
            bulk.add(self._bucket("c", doc_id), "u", (doc_id, seq))
        for key, code, args in dropping:
            bulk.add(key, code, args)
        self._sink(bulk.calls(epoch, clock))
        after = at if len(flat) // 2 > limit else at + 1
        args = [self.keep.bands, self._entries.day_at, *(seq for seq, _ in gone)]
        removed, _ = self._run(
            [
                self._fenced(self._drop_entries, [s_bucket], args, epoch, clock),
                partial(_hset, key=self._cursor, mapping={"at": after}),
            ]
        )
        return int(removed)


class _Entries:
    """How an s: entry of layouts 2 and 3 holds a canonical: `{simhash: 16 hex}{stamp: 4 hex}{doc_id}`, no figures."""

    day_at = _SIMHASH_HEX + 1
    """Where the stamp begins, for the scripts (Lua counts from 1)."""

    def write(self, simhash: int, stamp: str, figures: int, doc_id: str) -> str:
        return f"{simhash:0{_SIMHASH_HEX}x}{stamp}{doc_id}"

    def day(self, entry: str) -> int:
        return int(entry[_SIMHASH_HEX : _SIMHASH_HEX + _DAY_HEX], 16)

    def read(self, entry: str) -> tuple[int, int, str]:
        """The simhash, the figures (0: none kept) and the doc_id."""
        return int(entry[:_SIMHASH_HEX], 16), 0, entry[_SIMHASH_HEX + _DAY_HEX :]


class _EntriesWithFigures(_Entries):
    """Layout 4: `{stamp: 4 hex}{simhash and figures: 22 base64 digits}{doc_id}`. The stamp first, as in every
    other family's values; in base64 the figures (64 bits, `streams.features.figures`) cost an entry 6 bytes more
    than layout 3's, where 16 more hex digits would cost 16 (binascii's standard alphabet: the URL-safe one is
    a translation more, and a band read decodes hundreds of entries a query at 10M canonicals in 4x16)."""

    day_at = 1

    def write(self, simhash: int, stamp: str, figures: int, doc_id: str) -> str:
        both = binascii.b2a_base64(((simhash << 64) | figures).to_bytes(16, "big"), newline=False)
        return f"{stamp}{both[:_B64].decode()}{doc_id}"

    def day(self, entry: str) -> int:
        return int(entry[:_DAY_HEX], 16)

    def read(self, entry: str) -> tuple[int, int, str]:
        end = _DAY_HEX + _B64
        both = int.from_bytes(binascii.a2b_base64(entry[_DAY_HEX:end] + "=="), "big")
        return both >> 64, both & _LOW_64, entry[end:]


_WITHOUT_FIGURES = _Entries()
ENTRIES = _EntriesWithFigures()
"""How this version writes a new state's s: entries (the scale benchmark's bulk writer writes them so too)."""
_B64 = 22
"""Base64 digits of a simhash and a figures digest, 128 bits (the padding left out)."""
_LOW_64 = (1 << 64) - 1


class _Lua:
    """A script called on keys of one slot. On one server: EVALSHA, also in a pipeline, where redis-py
    would ask the server whether the script exists (SCRIPT EXISTS, a round trip of its own) before every
    execution; `RedisStateStore._run` loads it when a call finds it missing instead. On a cluster: EVAL,
    since its pipeline refuses EVALSHA and each node keeps a script cache of its own (a replica promoted
    by a failover has not seen SCRIPT LOAD): the body travels, Redis compiles it once."""

    def __init__(self, client: Client, source: str) -> None:
        self._source = source
        self._client = client
        self._script = client.register_script(source)
        self._eval = isinstance(client, RedisCluster)

    def __call__(self, keys: Sequence[str], args: Sequence[Any], client: Any = None) -> Any:
        """Run now (loading the script where missing), or queue on `client` (a pipeline)."""
        if self._eval:
            target = self._client if client is None else client
            return target.execute_command("EVAL", self._source, len(keys), *keys, *args)
        if client is None:
            return self._script(keys=keys, args=args)
        return client.evalsha(self._script.sha, len(keys), *keys, *args)

    def load(self) -> None:
        """Into the server's script cache (one server: a cluster's calls carry their body)."""
        if not self._eval:
            self._script.sha = self._client.script_load(self._source)


class _Slot:
    """The items of one round in one slot: the buckets they name (numbered from 1), their fence keys, the
    script's arguments so far, and where each answer goes."""

    __slots__ = ("args", "at", "buckets", "fences", "targets")

    def __init__(self) -> None:
        self.at: int | None = None
        """The clock its items are judged at, set by a 'k' item (None: the call's)."""
        self.buckets: dict[str, int] = {}
        self.fences: dict[str, None] = {}
        self.args: list[Any] = []
        self.targets: list[tuple[list[Any] | None, int]] = []


class _Bulk:
    """A round's writes as one `_BULK` call per slot (on one server, one call): a call per write costs the
    client far more than the script costs Redis. Items keep their order within a slot, so items on one key
    meet as the writes came."""

    __slots__ = ("_at", "_one", "_slots", "_store")

    def __init__(self, store: RedisStateStore) -> None:
        self._store = store
        self._at: int | None = None
        self._slots: dict[int, _Slot] = {}
        self._one = None if isinstance(store._redis, RedisCluster) else _Slot()
        """On one server, the one slot's items (every key is in it)."""
        if self._one is not None:
            self._slots[0] = self._one

    def add(self, bucket: str, code: str, args: Sequence[Any], target: list[Any] | None = None, index: int = 0) -> None:
        """Queue item `code` on `bucket`; its answer goes to `target[index]` (None: not wanted)."""
        items = self._one
        if items is None:
            slot = self._store._slot(bucket)
            items = self._slots.get(slot)
            if items is None:
                items = self._slots[slot] = _Slot()
        position = items.buckets.get(bucket)
        if position is None:
            position = items.buckets[bucket] = len(items.buckets) + 1
            items.fences[self._store._fence_key(bucket)] = None  # a dict: each fence once, in order
        queued = items.args
        if self._at is not None and items.at != self._at:  # the items from here on are judged at another clock
            items.at = self._at
            queued += ("k", position, self._at)
            items.targets.append((None, 0))
        queued.append(code)
        queued.append(position)
        queued += args
        items.targets.append((target, index))

    def at(self, clock: int | None) -> None:
        """Judge the items added next at `clock`, a document's own (None: as the items before them)."""
        self._at = clock

    def calls(self, epoch: int, clock: int) -> list[tuple[Call, Callable[[Any], None]]]:
        """One fenced call per slot, with what puts its answers in place."""
        keep = self._store.keep
        calls: list[tuple[Call, Callable[[Any], None]]] = []
        for items in self._slots.values():
            if not items.targets:
                continue
            fences = list(items.fences)
            args = [epoch, clock, len(fences), keep.verdicts, keep.exact, *items.args]
            call = partial(self._store._bulk, keys=[*fences, *items.buckets], args=args)
            calls.append((call, partial(_answer, items.targets)))
        return calls


def _answer(targets: Sequence[tuple[list[Any] | None, int]], answers: Sequence[Any]) -> None:
    for (target, index), answer in zip(targets, answers, strict=True):
        if target is not None:
            target[index] = answer


def _runs(keys: Sequence[str], slot: Callable[[str], int]) -> list[list[str]]:
    """`keys` cut into runs of consecutive keys of one slot."""
    runs: list[list[str]] = []
    for key in keys:
        if runs and slot(runs[-1][-1]) == slot(key):
            runs[-1].append(key)
        else:
            runs.append([key])
    return runs


def _get(key: str, client: Any) -> Any:
    return client.get(key)


def _exists(key: str, client: Any) -> Any:
    return client.exists(key)


def _unlink(key: str, client: Any) -> Any:
    return client.unlink(key)


def _set_absent(key: str, value: Any, client: Any) -> Any:
    return client.set(key, value, nx=True)


def _hget(key: str, field: str, client: Any) -> Any:
    return client.hget(key, field)


def _hsetnx(key: str, field: str, value: Any, client: Any) -> Any:
    return client.hsetnx(key, field, value)


def _incrby(key: str, amount: int, client: Any) -> Any:
    return client.incrby(key, amount)


def _hmget(key: str, fields: list[str], client: Any) -> Any:
    return client.hmget(key, fields)


def _hkeys(key: str, client: Any) -> Any:
    return client.hkeys(key)


def _hset(key: str, mapping: dict[str, Any], client: Any) -> Any:
    return client.hset(key, mapping=mapping)


def _ignore(_: Any) -> None:
    pass


_VERDICTS = (VerdictWrite, ReplaceVerdictWrite)
"""The writes that record a verdict (a tuple: `isinstance` on a union type is several times slower)."""
_FAMILIES = (("v", "v", "verdicts"), ("x", "v", "exact"), ("g", "g", "exact"), ("p", "p", "verdicts"))
"""The hash families swept bucket by bucket, where their stamp is (a value's prefix, a group's integer, a pending
link's prefix where it has one: `_pending_link`) and the `Keep` field they are kept by; then the s: buckets
(`keep.bands`)."""
_SWEPT = (*(kind for kind, _, _ in _FAMILIES), "s")
"""Every family a pass reads, in its order: the fields of `{prefix}oldest`."""


_HORIZON = "horizon"
"""The field of the sweep's cursor that says before when it removed verdicts (the clock less `verdicts_days` at
its latest step over them; moved forward only). `verdicts_days` lengthened since, a verdict older than this may
be gone although the setting keeps it: `verdict_expired` says so, as SQLite's `verdicts_horizon` does."""


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _bounded(clock: Any) -> int:
    """The clock as read from Redis, at most a day past this host's wall clock, as every writer clamps it: one
    that a worker with a skewed wall clock moved years ahead would hide every live entry at once, and let the
    sweep remove them."""
    return min(int(clock or 0), int(time.time()) + DAY_S)


def _day(published_at: int, wall: float) -> int:
    """The stamp of `published_at`: its day, clamped as the clock is (at most a day after the wall clock)."""
    return min(max(clamped(published_at, wall), 0) // DAY_S, _DAY_MAX)


def _day_end(day: int) -> int:
    """The last second of a stamp's day: an entry is hidden once all of its day is past its retention."""
    return day * DAY_S + DAY_S - 1


def _published_at(write: Write) -> int | None:
    """The stamp a write carries, if any: the clock moves to the newest in the batch."""
    match write:
        case ClaimWrite() | CanonicalWrite() | GrowWrite():
            return write.published_at
        case VerdictWrite(link) | ReplaceVerdictWrite(link):
            return link.published_at
    return None


def _by_document(writes: Sequence[Write]) -> list[tuple[str | None, list[Write]]]:
    """Writes split into per-document groups, each closed by its VerdictWrite (or ReplaceVerdictWrite).

    Writes after the last verdict belong to no document (None) and are applied as they are.
    """
    groups: list[tuple[str | None, list[Write]]] = []
    current: list[Write] = []
    for write in writes:
        current.append(write)
        if isinstance(write, _VERDICTS):
            groups.append((write.link.doc_id, current))
            current = []
    if current:
        groups.append((None, current))
    return groups


_VERDICT_CODE = {Verdict.UNIQUE: "u", Verdict.DUPLICATE: "d", Verdict.REVIEW: "r", Verdict.UNLINKED: "n"}
_VERDICT_OF = {code: verdict for verdict, code in _VERDICT_CODE.items()}
_STAGE_CODE = {None: "-", Stage.URL: "u", Stage.CONTENT: "c", Stage.SIMHASH: "s", Stage.SEMANTIC: "e"}
_STAGE_OF = {code: stage for stage, code in _STAGE_CODE.items()}
_NO_CONTENT = "-" * CONTENT_KEY_CHARS


def _settled(
    groups: Sequence[tuple[str | None, list[Write]]], decided: dict[str, Link | None]
) -> list[tuple[str, str]]:
    """(canonical, member) of the batch's documents whose planned link stands already and grows a group."""
    pairs = []
    for doc_id, group in groups:
        link = decided.get(doc_id) if doc_id is not None else None
        if link is None or doc_id is None or link.canonical_id != group[-1].link.canonical_id:  # type: ignore[union-attr]
            continue
        pairs += [(w.canonical_id, doc_id) for w in group if isinstance(w, GrowWrite) and w.count > 0]
    return pairs


def _marker(canonical_id: str, member: str, leaving: bool = False) -> str:
    """The field marking that `member` grew `canonical_id`'s group (`leaving`: shrank it), in the group's bucket:
    a control character first (no doc id has one), then 64 bits of a hash of both (fixed length: a long id
    never takes the bucket out of the compact encoding). A shrink's marker is another field than a growth's:
    one left by a crash only ever stops a shrink (a group one too many), never a later growth."""
    text = f"{canonical_id}\x1f{member}\x1f-" if leaving else f"{canonical_id}\x1f{member}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return f"\x00{digest}"


_CODED = "\x01"
"""Before a verdict's model part: a code of the store's registry follows, not a name (no name starts so)."""


def _verdict_value(link: Link, model: str) -> str:
    """`{verdict}{stage}{content}{score};{len(canonical)};{canonical}{model}`: one letter each for the
    verdict and the stage, the content key, the score, then the two strings, the first prefixed
    by its length and empty for a canonical (itself); the model as the store encodes it (`_encoded`:
    by code; by name before the codes). Every byte counts at millions of verdicts; JSON cost 40% more here."""
    canonical = "" if link.canonical_id == link.doc_id else link.canonical_id
    score = "" if link.score is None else repr(float(link.score))
    content = link.content or _NO_CONTENT
    return f"{_VERDICT_CODE[link.verdict]}{_STAGE_CODE[link.stage]}{content}{score};{len(canonical)};{canonical}{model}"


def _links(entries: dict[str, tuple[Link, int] | None]) -> dict[str, Link | None]:
    """The verdicts of `verdict_entries`, without their stamps."""
    return {doc_id: entry and entry[0] for doc_id, entry in entries.items()}


def _read_verdict(doc_id: str, value: str, model_name: Callable[[str], str]) -> Link:
    """A verdict as stored: `{stamp}{seq} ` then `_verdict_value` (its `published_at` is not kept, only its day)."""
    head, _, encoded = value.partition(" ")
    return _read_link(doc_id, encoded, model_name, int(head[_DAY_HEX:]))


def _read_link(doc_id: str, encoded: str, model_name: Callable[[str], str], seq: int | None = None) -> Link:
    """A `_verdict_value`: a verdict's link (with its `seq`), or a pending one (none drawn yet)."""
    verdict, stage = _VERDICT_OF[encoded[0]], _STAGE_OF[encoded[1]]
    start = 2 + CONTENT_KEY_CHARS
    content = encoded[2:start]
    score_end = encoded.index(";", start)
    length_end = encoded.index(";", score_end + 1)
    length = int(encoded[score_end + 1 : length_end])
    canonical = encoded[length_end + 1 : length_end + 1 + length] or doc_id
    model = encoded[length_end + 1 + length :] or None
    if model is not None and model.startswith(_CODED):
        model = model_name(model[1:])
    score = float(encoded[start:score_end]) if score_end > start else None
    return Link(
        doc_id,
        verdict,
        canonical,
        stage,
        score,
        model,
        seq,
        None if content == _NO_CONTENT else content,
    )
