-- Idempotency keys expire with the outbox retention (the janitor deletes them
-- by age): this index makes that an index range scan instead of a table scan.
CREATE INDEX idempotency_keys_age ON idempotency_keys (created_at);
