// Package cards provides the A2A cards of agents: an agent (or the account
// that owns it) publishes or withdraws its card and says what it offers
// (description, skills); the A2A gateway (shared/a2agw) serves a published
// card and treats an unpublished one exactly like an agent that does not
// exist. Methods return shared/api's wire types and mesh.Errors; the HTTP
// routes live in the adapter, cardshttp.
package cards

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/identity"
	"github.com/agentmesh/agentmesh/shared/mesh"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// Service implements the card routes on MySQL.
type Service struct {
	DB    *mysql.DB
	Clock mesh.Clock
	// BaseURL is the public base of the A2A routes (config MESH_A2A_URL,
	// e.g. http://127.0.0.1:8080 or the Function URL); CardURL answers
	// BaseURL + "/a2a/agents/{id}/.well-known/agent-card.json". Empty: the
	// answers' card_url is empty.
	BaseURL string
}

// Published is what the gateway needs to serve one published card.
type Published struct {
	AgentID     string
	Name        string // the agent's profile name
	Description string
	Skills      []api.A2ASkill
	// Version changes whenever the card or the agent's name changes; the
	// gateway derives the ETag from it.
	Version   string
	UpdatedAt time.Time
}

// ErrNotPublished is the one answer for an agent that does not exist and
// for one whose card is not published.
var ErrNotPublished = mesh.Errorf(mesh.KindNotFound, "card_not_found", "no published A2A card for this agent")

// errNoAgent answers the owner's routes for an agent that is gone (its
// token outlived it).
var errNoAgent = mesh.Errorf(mesh.KindNotFound, "agent_not_found", "no agent with this id")

// Bounds of a card: the served card stays a few hundred KiB at most, far
// inside every client's and Lambda's limits.
const (
	MaxDescription      = 2000
	MaxSkills           = 32
	MaxSkillName        = 128
	MaxSkillDescription = 1000
	MaxTags             = 16
	MaxTag              = 64
)

// SkillIDPattern is what a skill id looks like.
var SkillIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

func (s *Service) now() time.Time {
	if s.Clock == nil {
		return mesh.SystemClock()
	}
	return s.Clock()
}

// CardURL is where agentID's card is served when published ("" without a
// BaseURL).
func (s *Service) CardURL(agentID string) string {
	if s.BaseURL == "" {
		return ""
	}
	return s.BaseURL + "/a2a/agents/" + agentID + "/.well-known/agent-card.json"
}

func invalid(format string, args ...any) error {
	return mesh.Errorf(mesh.KindUnprocessable, "invalid_card", format, args...)
}

// Validate checks a card request against the bounds above and returns it
// normalized (nil lists as empty ones), or a 422 naming the first bad field.
// Published must be set: a body that forgot it must not withdraw the card.
func Validate(req api.A2ACardRequest) (api.A2ACardRequest, error) {
	if req.Published == nil {
		return req, invalid("published is required")
	}
	if !utf8.ValidString(req.Description) || utf8.RuneCountInString(req.Description) > MaxDescription {
		return req, invalid("description must be at most %d characters", MaxDescription)
	}
	if len(req.Skills) > MaxSkills {
		return req, invalid("a card lists at most %d skills", MaxSkills)
	}
	out := api.A2ACardRequest{Published: new(*req.Published), Description: req.Description, Skills: make([]api.A2ASkill, 0, len(req.Skills))}
	seen := make(map[string]bool, len(req.Skills))
	for i, sk := range req.Skills {
		switch {
		case !SkillIDPattern.MatchString(sk.ID):
			return req, invalid("skills[%d].id must match %s", i, SkillIDPattern)
		case seen[sk.ID]:
			return req, invalid("skills[%d].id %q repeats an earlier skill's id", i, sk.ID)
		case !mesh.PrintableName(sk.Name) || utf8.RuneCountInString(sk.Name) > MaxSkillName:
			return req, invalid("skills[%d].name must be 1-%d printable characters", i, MaxSkillName)
		case !utf8.ValidString(sk.Description) || utf8.RuneCountInString(sk.Description) > MaxSkillDescription:
			return req, invalid("skills[%d].description must be at most %d characters", i, MaxSkillDescription)
		case len(sk.Tags) > MaxTags:
			return req, invalid("skills[%d] has more than %d tags", i, MaxTags)
		}
		seen[sk.ID] = true
		tags := make([]string, 0, len(sk.Tags))
		for j, tag := range sk.Tags {
			if !mesh.PrintableName(tag) || utf8.RuneCountInString(tag) > MaxTag {
				return req, invalid("skills[%d].tags[%d] must be 1-%d printable characters", i, j, MaxTag)
			}
			tags = append(tags, tag)
		}
		out.Skills = append(out.Skills, api.A2ASkill{ID: sk.ID, Name: sk.Name, Description: sk.Description, Tags: tags})
	}
	return out, nil
}

// row is one agent with its card (a card never written reads as the zero
// values: unpublished, version 0).
type row struct {
	name        string
	published   bool
	description string
	skills      []byte
	version     int64
	updatedAt   sql.NullTime
}

const selectCardSQL = `SELECT a.name, COALESCE(c.published, 0), COALESCE(c.description, ''), COALESCE(c.skills, '[]'), COALESCE(c.version, 0), c.updated_at
FROM agents a LEFT JOIN a2a_cards c ON c.agent_id = a.agent_id WHERE a.agent_id = ?`

func readRow(ctx context.Context, q identity.Querier, query, agentID string) (row, error) {
	var r row
	err := q.QueryRowContext(ctx, query, agentID).Scan(&r.name, &r.published, &r.description, &r.skills, &r.version, &r.updatedAt)
	return r, err
}

func (s *Service) card(agentID string, r row) (api.A2ACard, error) {
	skills := []api.A2ASkill{}
	if err := json.Unmarshal(r.skills, &skills); err != nil {
		return api.A2ACard{}, fmt.Errorf("cards: stored skills of %s: %w", agentID, err)
	}
	out := api.A2ACard{AgentID: agentID, Name: r.name, Published: r.published, Description: r.description,
		Skills: skills, CardURL: s.CardURL(agentID)}
	if r.updatedAt.Valid {
		out.UpdatedAt = r.updatedAt.Time
	}
	return out, nil
}

// Put publishes, edits or withdraws agentID's own card (the agent's route;
// it spends the agent's rate budget like every agent route). The account's
// route calls it too, acting for its agent. A request equal to the stored
// card changes nothing (not even the version, so cached cards stay valid);
// every other one replaces the card and bumps its version.
func (s *Service) Put(ctx context.Context, agentID string, req api.A2ACardRequest) (api.A2ACard, error) {
	req, err := Validate(req)
	if err != nil {
		return api.A2ACard{}, err
	}
	skills, err := json.Marshal(req.Skills)
	if err != nil {
		return api.A2ACard{}, err
	}
	var out api.A2ACard
	err = s.DB.InTx(ctx, func(tx *sql.Tx) error {
		now := s.now()
		if err := identity.TakeRate(ctx, tx, agentID, now); err != nil {
			return err
		}
		r, err := readRow(ctx, tx, selectCardSQL+" FOR UPDATE", agentID)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoAgent
		}
		if err != nil {
			return err
		}
		if r.version == 0 || r.published != *req.Published || r.description != req.Description || !bytes.Equal(r.skills, skills) {
			if _, err := tx.ExecContext(ctx, `INSERT INTO a2a_cards (agent_id, published, description, skills, version, updated_at) VALUES (?, ?, ?, ?, 1, ?)
ON DUPLICATE KEY UPDATE published = VALUES(published), description = VALUES(description), skills = VALUES(skills), version = version + 1, updated_at = VALUES(updated_at)`,
				agentID, *req.Published, req.Description, skills, now); err != nil {
				return err
			}
			r.published, r.description, r.skills, r.version = *req.Published, req.Description, skills, r.version+1
			r.updatedAt = sql.NullTime{Time: now, Valid: true}
		}
		out, err = s.card(agentID, r)
		return err
	})
	return out, err
}

// Get returns agentID's card settings, published or not (the owner's view;
// never published: Published false, no skills). Like every agent read it
// first spends one request of the agent's rate budget.
func (s *Service) Get(ctx context.Context, agentID string) (api.A2ACard, error) {
	if err := identity.TakeRate(ctx, s.DB, agentID, s.now()); err != nil {
		return api.A2ACard{}, err
	}
	return s.Read(ctx, agentID)
}

// Read is Get without spending the agent's budget, for a caller that has
// paid its own (an account's session spends the account's).
func (s *Service) Read(ctx context.Context, agentID string) (api.A2ACard, error) {
	r, err := readRow(ctx, s.DB, selectCardSQL, agentID)
	if errors.Is(err, sql.ErrNoRows) {
		return api.A2ACard{}, errNoAgent
	}
	if err != nil {
		return api.A2ACard{}, err
	}
	return s.card(agentID, r)
}

// MaxReadMany bounds the agents of one ReadMany (a console page's).
const MaxReadMany = 100

const readManySQL = `SELECT a.agent_id, a.name, COALESCE(c.published, 0), COALESCE(c.description, ''), COALESCE(c.skills, '[]'), COALESCE(c.version, 0), c.updated_at
FROM agents a LEFT JOIN a2a_cards c ON c.agent_id = a.agent_id WHERE a.agent_id IN (?)`

// ReadMany is Read for up to MaxReadMany agents at once, in one query: the
// cards of those that exist, by agent id.
func (s *Service) ReadMany(ctx context.Context, agentIDs []string) (map[string]api.A2ACard, error) {
	out := make(map[string]api.A2ACard, len(agentIDs))
	if len(agentIDs) == 0 {
		return out, nil
	}
	if len(agentIDs) > MaxReadMany {
		return nil, fmt.Errorf("cards: ReadMany of %d agents, at most %d", len(agentIDs), MaxReadMany)
	}
	args := make([]any, len(agentIDs))
	for i, id := range agentIDs {
		args[i] = id
	}
	// The one "IN (?)" of the statement grows to one placeholder per id.
	query := strings.Replace(readManySQL, "IN (?)", "IN ("+mysql.Placeholders(len(agentIDs))+")", 1)
	rows, err := s.DB.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.name, &r.published, &r.description, &r.skills, &r.version, &r.updatedAt); err != nil {
			return nil, err
		}
		if out[id], err = s.card(id, r); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// PublishedCard returns agentID's card if it is published, else
// ErrNotPublished (also for an agent that does not exist or an invalid id).
// It is one primary-key read and spends no budget: the card is public.
func (s *Service) PublishedCard(ctx context.Context, agentID string) (Published, error) {
	if !mesh.ValidAgentID(agentID) {
		return Published{}, ErrNotPublished
	}
	var p Published
	var skills []byte
	var version int64
	err := s.DB.QueryRowContext(ctx, `SELECT a.name, c.description, c.skills, c.version, c.updated_at
FROM a2a_cards c JOIN agents a ON a.agent_id = c.agent_id WHERE c.agent_id = ? AND c.published = 1`, agentID).
		Scan(&p.Name, &p.Description, &skills, &version, &p.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Published{}, ErrNotPublished
	}
	if err != nil {
		return Published{}, err
	}
	if err := json.Unmarshal(skills, &p.Skills); err != nil {
		return Published{}, fmt.Errorf("cards: stored skills of %s: %w", agentID, err)
	}
	if p.Skills == nil {
		p.Skills = []api.A2ASkill{}
	}
	p.AgentID = agentID
	p.Version = Version(version, p.Name)
	return p, nil
}

// Version is the card version the gateway's ETag derives from: the stored
// version and a hash of the agent's name, which the card shows but the
// card's row does not hold (a rename must change the ETag too).
func Version(version int64, name string) string {
	h := sha256.Sum256([]byte(name))
	return fmt.Sprintf("%d-%s", version, hex.EncodeToString(h[:8]))
}

// New returns the card service over db, announcing card URLs under a2aURL
// (config A2AURL, MESH_A2A_URL; "" announces none).
func New(db *mysql.DB, a2aURL string) *Service {
	return &Service{DB: db, BaseURL: a2aURL}
}
