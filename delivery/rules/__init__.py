"""Pure rules, each tested as a table: retry, endpoint health, concurrency limit, pace, take-over,
the digest calendar, failure causes, a destination's condition. None of them queries the database."""
