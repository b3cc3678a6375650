-- The push channel's live WebSocket connections (issue 16): which agent,
-- through which API key, opened each API Gateway connection. $connect
-- inserts (at most push.MaxConnsPerAgent per agent, the oldest deleted),
-- $disconnect and a 410 Gone delete, the push janitor deletes rows past
-- expires_at or of revoked keys. The dispatcher reads an agent's rows to
-- post its records. frame_tat_us is the GCRA state (microseconds) of the
-- per-connection budget of client frames: meshd sends none, so a client
-- that floods is closed. IF NOT EXISTS so that an interrupted run can be
-- repeated.
CREATE TABLE IF NOT EXISTS push_connections (
  connection_id  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  agent_id       VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  key_id         VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  routing_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  instance_id    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  connected_at   DATETIME(6) NOT NULL,
  expires_at     DATETIME(6) NOT NULL,
  frame_tat_us   BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (connection_id),
  KEY push_connections_agent (agent_id, connected_at, connection_id),
  KEY push_connections_key (key_id),
  KEY push_connections_expiry (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
