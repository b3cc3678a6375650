-- Indexes of the retention janitor (shared/retention, issue 20): each
-- policy's oldest rows are one index range, so a batch reads only what it
-- deletes. MySQL has no CREATE INDEX IF NOT EXISTS: a run cut short runs
-- them again, and the runner counts "duplicate key name" as done.

-- The tasks of a conversation: whether a conversation still has a task
-- (its registration in task_contexts, or the task whose id is its context,
-- is kept while one does).
CREATE INDEX tasks_context ON tasks (context_id);
-- Registrations of conversations by age.
CREATE INDEX task_contexts_age ON task_contexts (created_at);
-- Answered friend requests by the time of the answer (pending ones have no
-- decided_at and are not in the range).
CREATE INDEX friend_requests_decided ON friend_requests (decided_at);
-- Revoked keys by the time of the revocation.
CREATE INDEX api_keys_revoked ON api_keys (revoked_at);
