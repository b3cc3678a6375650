-- An agent can block another: no friend requests, no messages from it.
-- IF NOT EXISTS so that a migration interrupted after this statement can be
-- run again (MySQL DDL is not transactional).
CREATE TABLE IF NOT EXISTS agent_blocks (
  agent_id    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  blocked_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (agent_id, blocked_id),
  KEY agent_blocks_blocked (blocked_id, agent_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

