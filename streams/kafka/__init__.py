"""Kafka adapters: topic administration, the crawler-side producer (and, next, the stage agents)."""
