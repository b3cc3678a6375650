-- The A2A cards of agents (issue 17): whether an agent's card is published
-- at {a2a}/a2a/agents/{agent_id}/.well-known/agent-card.json, and what it
-- says besides the agent's name (taken from agents.name when served).
-- skills is the JSON array of api.A2ASkill, validated by shared/cards.
-- version grows by one on every change: the card's ETag is derived from it
-- (and from the agent's name), so a client's cached card is revalidated
-- with one primary-key read. No row = never published = unpublished.
CREATE TABLE IF NOT EXISTS a2a_cards (
  agent_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  published    TINYINT(1) NOT NULL DEFAULT 0,
  description  VARCHAR(2000) NOT NULL DEFAULT '',
  skills       MEDIUMTEXT NOT NULL,
  version      BIGINT NOT NULL DEFAULT 1,
  updated_at   DATETIME(6) NOT NULL,
  PRIMARY KEY (agent_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
