-- Accounts: the people agents belong to (issue 12). Every statement can run
-- again after an interrupted migration (MySQL DDL is not transactional):
-- CREATE TABLE IF NOT EXISTS and INSERT IGNORE only, no ALTER of existing
-- tables (an agent's account, kind and friendship policy live beside it).

CREATE TABLE IF NOT EXISTS accounts (
  account_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  email          VARCHAR(254) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  name           VARCHAR(200) NOT NULL,
  -- argon2id in the PHC string format; NULL: the account cannot sign in.
  password_hash  VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NULL,
  operator       TINYINT NOT NULL DEFAULT 0,
  created_at     DATETIME(6) NOT NULL,
  PRIMARY KEY (account_id),
  UNIQUE KEY accounts_email (email)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- The default operator account owns every agent that existed before
-- accounts, and every agent the admin routes create.
INSERT IGNORE INTO accounts (account_id, email, name, password_hash, operator, created_at)
VALUES ('operator', 'operator@localhost', 'Operator', NULL, 1, UTC_TIMESTAMP(6));

-- friend_policy: 'agent' (the agent accepts its own requests) or 'account'
-- (its account must approve); same_account_auto: requests between agents of
-- one account are accepted at once.
CREATE TABLE IF NOT EXISTS agent_accounts (
  agent_id           VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  account_id         VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  kind               VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'normal',
  friend_policy      VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'agent',
  same_account_auto  TINYINT NOT NULL DEFAULT 0,
  PRIMARY KEY (agent_id),
  KEY agent_accounts_account (account_id, agent_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

INSERT IGNORE INTO agent_accounts (agent_id, account_id, kind, friend_policy, same_account_auto)
SELECT agent_id, 'operator', 'normal', 'agent', 0 FROM agents;

-- Sessions of signed-in accounts: only the SHA-256 of the cookie's token is
-- stored, so a copy of the table signs nobody in.
CREATE TABLE IF NOT EXISTS account_sessions (
  token_hash  BINARY(32) NOT NULL,
  account_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  csrf_token  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at  DATETIME(6) NOT NULL,
  expires_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (token_hash),
  KEY account_sessions_account (account_id, expires_at),
  KEY account_sessions_expiry (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Every change to friendships, group membership, keys, policies and dead
-- letters: who (actor_kind agent|account|admin, actor_id), what (action,
-- detail), when, and which agents it touched (agent_id, other_id), so the
-- accounts of both can read it.
CREATE TABLE IF NOT EXISTS audit_log (
  id           BIGINT NOT NULL AUTO_INCREMENT,
  occurred_at  DATETIME(6) NOT NULL,
  actor_kind   VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  actor_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  action       VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  agent_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  other_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  detail       VARCHAR(500) NOT NULL,
  PRIMARY KEY (id),
  KEY audit_agent (agent_id, id),
  KEY audit_other (other_id, id),
  KEY audit_actor (actor_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
