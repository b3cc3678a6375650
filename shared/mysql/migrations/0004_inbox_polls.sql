-- Long polls of GET /v1/inbox hold a lease per agent: at most a few slots
-- (Inbox.MaxPolls), each taken by one waiting request and freed when it
-- answers. The row expires on its own, so a function instance that dies
-- while holding a slot cannot keep it. No lock or transaction is held while
-- a request waits: taking and freeing a slot are single statements.
-- IF NOT EXISTS so that an interrupted run can be repeated.
CREATE TABLE IF NOT EXISTS inbox_polls (
  agent_id    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  slot        INT NOT NULL,
  holder      VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  expires_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (agent_id, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
