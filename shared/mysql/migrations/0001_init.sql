-- Agent Mesh schema, version 1.
-- Runs unchanged on Aurora MySQL 8.0 and MariaDB 10.11: no RETURNING, no
-- CREATE ... IF NOT EXISTS on indexes, no JSON operators. Identifier columns use
-- utf8mb4_bin so 'Alice' <> 'alice' and 'bob ' <> 'bob'. Times are UTC,
-- written by the application (its clock is injectable), DATETIME(6).

CREATE TABLE agents (
  agent_id            VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  name                VARCHAR(200) NOT NULL,
  status              VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'inactive',
  instance_id         VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  last_heartbeat_at   DATETIME(6) NULL,
  stats               TEXT NULL,
  key_epoch           INT NOT NULL DEFAULT 1,
  created_at          DATETIME(6) NOT NULL,
  PRIMARY KEY (agent_id),
  KEY agents_presence (status, last_heartbeat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE api_keys (
  key_id       VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  agent_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  secret_hash  BINARY(32) NOT NULL,
  created_at   DATETIME(6) NOT NULL,
  revoked_at   DATETIME(6) NULL,
  PRIMARY KEY (key_id),
  KEY api_keys_agent (agent_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- GCRA state per agent: tat is the theoretical arrival time in microseconds
-- since the epoch. Its own table keeps the hot rate row off the agents row.
CREATE TABLE rate_limits (
  agent_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  tat_us    BIGINT NOT NULL,
  PRIMARY KEY (agent_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Friendship is stored in both directions so "friends of X" is one range scan.
CREATE TABLE friendships (
  agent_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  friend_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (agent_id, friend_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE friend_requests (
  request_id  BIGINT NOT NULL AUTO_INCREMENT,
  from_agent  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  to_agent    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  status      VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
  created_at  DATETIME(6) NOT NULL,
  decided_at  DATETIME(6) NULL,
  PRIMARY KEY (request_id),
  KEY friend_requests_to (to_agent, status),
  KEY friend_requests_from (from_agent, status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- "groups" is a reserved word in MySQL 8, hence mesh_groups.
CREATE TABLE mesh_groups (
  group_id    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  name        VARCHAR(200) NOT NULL,
  owner_id    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  context_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (group_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE group_members (
  group_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  agent_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  role       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  joined_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (group_id, agent_id),
  KEY group_members_agent (agent_id, group_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE tasks (
  task_id      VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  context_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  group_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  initiator    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  recipient    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  status       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at   DATETIME(6) NOT NULL,
  updated_at   DATETIME(6) NOT NULL,
  PRIMARY KEY (task_id),
  KEY tasks_idle (status, updated_at),
  KEY tasks_initiator (initiator, updated_at),
  KEY tasks_recipient (recipient, updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE task_messages (
  id          BIGINT NOT NULL AUTO_INCREMENT,
  task_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  message_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  sender      VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  parts       MEDIUMTEXT NOT NULL,
  created_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  KEY task_messages_task (task_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE task_artifacts (
  id           BIGINT NOT NULL AUTO_INCREMENT,
  task_id      VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  artifact_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  name         VARCHAR(200) NOT NULL,
  parts        MEDIUMTEXT NOT NULL,
  created_by   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at   DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  KEY task_artifacts_task (task_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Idempotency of writes per (sender, message_id): the request's hash and the
-- response it got, so a retry returns the original result and a different
-- body under the same id is a 409.
CREATE TABLE idempotency_keys (
  sender        VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  message_id    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  request_hash  BINARY(32) NOT NULL,
  response      MEDIUMTEXT NOT NULL,
  created_at    DATETIME(6) NOT NULL,
  PRIMARY KEY (sender, message_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- One row per recipient, created with the agent: the gapless seq counter.
-- Writers lock it (UPDATE) inside their transaction, so seq order is commit order.
CREATE TABLE inbox_counters (
  recipient  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  last_seq   BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (recipient)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- The outbox is also the inbox log: MySQL is the source of truth, Kafka a
-- delivery path. delivery: pending -> sent | failed (dead letter, still readable).
CREATE TABLE outbox_events (
  id           BIGINT NOT NULL AUTO_INCREMENT,
  recipient    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  seq          BIGINT NOT NULL,
  event_id     VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  type         VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  sender       VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  task_id      VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  context_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  group_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  message_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  key_epoch    INT NOT NULL,
  body         MEDIUMTEXT NOT NULL,
  trace_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  occurred_at  DATETIME(6) NOT NULL,
  delivery     VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
  last_error   VARCHAR(500) NULL,
  sent_at      DATETIME(6) NULL,
  PRIMARY KEY (id),
  UNIQUE KEY outbox_recipient_seq (recipient, seq),
  KEY outbox_pending (delivery, recipient, seq),
  KEY outbox_sent_age (delivery, sent_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Dispatcher state per recipient: the backoff of the recipient's head event.
-- A failing event blocks only its own recipient; dispatchers lock these rows
-- with SKIP LOCKED so two dispatchers never publish one recipient at once.
CREATE TABLE dispatch_state (
  recipient        VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  attempts         INT NOT NULL DEFAULT 0,
  next_attempt_at  DATETIME(6) NOT NULL,
  last_error       VARCHAR(500) NULL,
  PRIMARY KEY (recipient)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
