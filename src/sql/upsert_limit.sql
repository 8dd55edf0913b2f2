-- Create or replace one limit (PUT /limits/{key}), validated beforehand
-- (core::limits::Limit::parse). A replace keeps created_at and the key's rate
-- state: a state counted under another rate or window (limit_state.basis) reads
-- as a full burst (core::limits::Gcra::basis), so a changed rate needs no reset.
-- ?1 key, ?2 rate, ?3 per_seconds, ?4 burst (?2 and ?4 both NULL without a rate),
-- ?5 concurrency (NULL: none), ?6 now.
INSERT INTO limits (key, rate, per_seconds, burst, concurrency, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
ON CONFLICT (key) DO UPDATE
SET rate = excluded.rate,
    per_seconds = excluded.per_seconds,
    burst = excluded.burst,
    concurrency = excluded.concurrency,
    updated_at = excluded.updated_at
RETURNING key, rate, per_seconds, burst, concurrency, created_at, updated_at;
