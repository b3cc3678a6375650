package cards_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/api"
	"github.com/agentmesh/agentmesh/shared/cards"
	"github.com/agentmesh/agentmesh/shared/identity/identitytest"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

func newService(t *testing.T) *cards.Service {
	t.Helper()
	id, clock, _ := identitytest.NewService(t)
	identitytest.Agents(t, id.DB, "carto", "other")
	return &cards.Service{DB: id.DB, Clock: clock.Now, BaseURL: "https://a2a.example"}
}

func skill(id string) api.A2ASkill {
	return api.A2ASkill{ID: id, Name: "Skill " + id, Description: "does " + id, Tags: []string{"t"}}
}

func TestPublishEditWithdraw(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	want := api.A2ACardRequest{Published: new(true), Description: "maps", Skills: []api.A2ASkill{skill("draw"), skill("measure")}}

	t.Run("a card never written is unpublished, empty, and not served", func(t *testing.T) {
		c, err := s.Get(ctx, "carto")
		if err != nil || c.Published || c.Skills == nil || len(c.Skills) != 0 || c.Name != "carto" ||
			c.CardURL != "https://a2a.example/a2a/agents/carto/.well-known/agent-card.json" {
			t.Fatalf("%+v %v", c, err)
		}
		if _, err := s.PublishedCard(ctx, "carto"); !errors.Is(err, cards.ErrNotPublished) {
			t.Fatalf("served: %v", err)
		}
	})
	var v1 string
	t.Run("publishing serves the card with the agent's name at version 1", func(t *testing.T) {
		c, err := s.Put(ctx, "carto", want)
		if err != nil || !c.Published || !reflect.DeepEqual(c.Skills, want.Skills) || c.UpdatedAt.IsZero() {
			t.Fatalf("%+v %v", c, err)
		}
		p, err := s.PublishedCard(ctx, "carto")
		if err != nil || p.Name != "carto" || p.Description != "maps" || !reflect.DeepEqual(p.Skills, want.Skills) || !strings.HasPrefix(p.Version, "1-") {
			t.Fatalf("%+v %v", p, err)
		}
		v1 = p.Version
	})
	t.Run("the same request again changes nothing, not even the version", func(t *testing.T) {
		if _, err := s.Put(ctx, "carto", want); err != nil {
			t.Fatal(err)
		}
		if p, _ := s.PublishedCard(ctx, "carto"); p.Version != v1 {
			t.Fatalf("version %s, was %s", p.Version, v1)
		}
	})
	var v2 string
	t.Run("an edit bumps the version", func(t *testing.T) {
		edit := want
		edit.Skills = []api.A2ASkill{skill("draw")}
		if _, err := s.Put(ctx, "carto", edit); err != nil {
			t.Fatal(err)
		}
		p, err := s.PublishedCard(ctx, "carto")
		if err != nil || len(p.Skills) != 1 || p.Version == v1 || !strings.HasPrefix(p.Version, "2-") {
			t.Fatalf("%+v %v", p, err)
		}
		v2 = p.Version
	})
	t.Run("renaming the agent changes the version the ETag derives from", func(t *testing.T) {
		if _, err := s.DB.Exec("UPDATE agents SET name = 'Cartographer' WHERE agent_id = 'carto'"); err != nil {
			t.Fatal(err)
		}
		p, err := s.PublishedCard(ctx, "carto")
		if err != nil || p.Name != "Cartographer" || p.Version == v2 {
			t.Fatalf("%+v %v (was %s)", p, err, v2)
		}
	})
	t.Run("withdrawing answers exactly like an agent that does not exist", func(t *testing.T) {
		if _, err := s.Put(ctx, "carto", api.A2ACardRequest{Published: new(false), Description: "maps"}); err != nil {
			t.Fatal(err)
		}
		_, gone := s.PublishedCard(ctx, "carto")
		_, none := s.PublishedCard(ctx, "nobody")
		_, bad := s.PublishedCard(ctx, "not an id")
		if !errors.Is(gone, cards.ErrNotPublished) || gone != none || none != bad {
			t.Fatalf("withdrawn %v, nonexistent %v, invalid %v", gone, none, bad)
		}
		c, err := s.Get(ctx, "carto")
		if err != nil || c.Published || c.Description != "maps" {
			t.Fatalf("the owner's view: %+v %v", c, err)
		}
	})
	t.Run("another agent's card is its own", func(t *testing.T) {
		if c, err := s.Get(ctx, "other"); err != nil || c.Published || c.Description != "" {
			t.Fatalf("%+v %v", c, err)
		}
	})
}

func TestInvalidCardsAreRefusedAndChangeNothing(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	good := api.A2ACardRequest{Published: new(true), Description: "ok", Skills: []api.A2ASkill{skill("a")}}
	if _, err := s.Put(ctx, "carto", good); err != nil {
		t.Fatal(err)
	}
	before, _ := s.PublishedCard(ctx, "carto")
	many := func(n int) []api.A2ASkill {
		out := make([]api.A2ASkill, n)
		for i := range out {
			out[i] = skill(fmt.Sprintf("s%d", i))
		}
		return out
	}
	with := func(change func(sk *api.A2ASkill)) []api.A2ASkill {
		sk := skill("x")
		change(&sk)
		return []api.A2ASkill{sk}
	}
	// Every case asks to withdraw the card (the loop sets Published false,
	// but for the one without it), so a wrongly accepted one shows as a card
	// no longer served.
	const noPublished = "a card without published"
	cases := []struct {
		name string
		req  api.A2ACardRequest
	}{
		{noPublished, api.A2ACardRequest{Description: "ok", Skills: []api.A2ASkill{skill("a")}}},
		{"a description of 2001 characters", api.A2ACardRequest{Description: strings.Repeat("é", 2001)}},
		{"33 skills", api.A2ACardRequest{Skills: many(33)}},
		{"two skills with one id", api.A2ACardRequest{Skills: []api.A2ASkill{skill("a"), skill("a")}}},
		{"a skill id with a space", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.ID = "a b" })}},
		{"a skill id starting with a dot", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.ID = ".a" })}},
		{"a skill id of 65 characters", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.ID = strings.Repeat("a", 65) })}},
		{"a skill without a name", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.Name = "" })}},
		{"a skill name of 129 characters", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.Name = strings.Repeat("n", 129) })}},
		{"a skill name with a control character", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.Name = "a\x00b" })}},
		{"a skill description of 1001 characters", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.Description = strings.Repeat("d", 1001) })}},
		{"17 tags", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.Tags = strings.Split(strings.Repeat("t,", 16)+"t", ",") })}},
		{"a tag of 65 characters", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.Tags = []string{strings.Repeat("t", 65)} })}},
		{"an empty tag", api.A2ACardRequest{Skills: with(func(sk *api.A2ASkill) { sk.Tags = []string{""} })}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is a 422 invalid_card and changes nothing", func(t *testing.T) {
			if tc.name != noPublished {
				tc.req.Published = new(false)
			}
			_, err := s.Put(ctx, "carto", tc.req)
			if me := mesh.AsError(err); me.Kind != mesh.KindUnprocessable || me.Code != "invalid_card" {
				t.Fatalf("got %v", err)
			}
			if tc.name == noPublished && !strings.Contains(err.Error(), "published is required") {
				t.Fatalf("got %v, want it to name the missing field", err)
			}
			after, err := s.PublishedCard(ctx, "carto")
			if err != nil || !reflect.DeepEqual(after, before) {
				t.Fatalf("changed: %+v %v", after, err)
			}
		})
	}
	t.Run("the bounds themselves are accepted", func(t *testing.T) {
		sk := api.A2ASkill{ID: "A" + strings.Repeat("z", 63), Name: strings.Repeat("n", 128), Description: strings.Repeat("d", 1000), Tags: strings.Split(strings.Repeat(strings.Repeat("t", 64)+",", 15)+strings.Repeat("t", 64), ",")}
		skills := append(many(31), sk)
		if _, err := s.Put(ctx, "carto", api.A2ACardRequest{Published: new(true), Description: strings.Repeat("é", 2000), Skills: skills}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPutSpendsTheAgentsRateBudget(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	if _, err := s.DB.Exec("UPDATE rate_limits SET tat_us = ? WHERE agent_id = 'carto'", s.Clock().Add(time.Hour).UnixMicro()); err != nil {
		t.Fatal(err)
	}
	t.Run("a Put past the budget is a 429 and publishes nothing", func(t *testing.T) {
		_, err := s.Put(ctx, "carto", api.A2ACardRequest{Published: new(true)})
		if !mesh.IsKind(err, mesh.KindRateLimited) {
			t.Fatalf("got %v", err)
		}
		if _, err := s.PublishedCard(ctx, "carto"); !errors.Is(err, cards.ErrNotPublished) {
			t.Fatalf("published anyway: %v", err)
		}
	})
	t.Run("a Get past the budget is a 429", func(t *testing.T) {
		if _, err := s.Get(ctx, "carto"); !mesh.IsKind(err, mesh.KindRateLimited) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestCardURL(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"", ""},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080/a2a/agents/carto/.well-known/agent-card.json"},
	} {
		t.Run(fmt.Sprintf("base %q gives %q", tc.base, tc.want), func(t *testing.T) {
			if got := (&cards.Service{BaseURL: tc.base}).CardURL("carto"); got != tc.want {
				t.Fatalf("got %q", got)
			}
		})
	}
}

func TestReadMany(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	if _, err := s.Put(ctx, "carto", api.A2ACardRequest{Published: new(true), Description: "maps"}); err != nil {
		t.Fatal(err)
	}
	t.Run("it answers the cards of the agents that exist, written or not", func(t *testing.T) {
		got, err := s.ReadMany(ctx, []string{"carto", "other", "nobody"})
		if err != nil || len(got) != 2 || !got["carto"].Published || got["carto"].Description != "maps" || got["other"].Published {
			t.Fatalf("%+v %v", got, err)
		}
	})
	t.Run("more than MaxReadMany agents is refused", func(t *testing.T) {
		if _, err := s.ReadMany(ctx, make([]string, cards.MaxReadMany+1)); err == nil {
			t.Fatal("no error")
		}
	})
}
