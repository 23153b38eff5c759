package queuecore_test

import (
	"errors"
	"testing"

	queuecore "github.com/queuecore/queuecore-go"
)

func TestGroupFlowControlAndFilter(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 2)
	g, err := c.ConsumerGroups.Update(ctx, topic, "flow", queuecore.ConsumerGroupUpdateParams{
		MaxInFlight: 100, Rate: 2.5, Filter: `headers.type = "order"`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if g.Config.MaxInFlight != 100 || g.Config.Rate != 2.5 || g.Config.Filter != `headers.type = "order"` {
		t.Fatalf("config %+v", g.Config)
	}
	if len(g.FilterAppliesFrom) != 2 || g.FilterAppliesFrom[1] != (queuecore.FilterStart{Partition: 1, Offset: 0}) {
		t.Fatalf("filterAppliesFrom %+v", g.FilterAppliesFrom)
	}
	kept, err := c.ConsumerGroups.Update(ctx, topic, "flow", queuecore.ConsumerGroupUpdateParams{AckTimeout: "20s"})
	if err != nil || kept.Config.MaxInFlight != 100 || kept.FilterAppliesFrom != nil {
		t.Fatalf("kept %+v %v", kept, err)
	}
	_, err = c.ConsumerGroups.Update(ctx, topic, "flow", queuecore.ConsumerGroupUpdateParams{Filter: "headers.type ="})
	var apiErr *queuecore.Error
	if !errors.Is(err, queuecore.ErrBadRequest) || !errors.As(err, &apiErr) {
		t.Fatalf("bad filter: %v", err)
	}
	if len(apiErr.Details) != 1 || apiErr.Details[0].Field != "filter" || apiErr.Details[0].Position != 15 || apiErr.Details[0].Expected == "" {
		t.Fatalf("details %+v", apiErr.Details)
	}
	removed, err := c.ConsumerGroups.Update(ctx, topic, "flow", queuecore.ConsumerGroupUpdateParams{
		RemoveMaxInFlight: true, RemoveRate: true, RemoveFilter: true,
	})
	if err != nil || removed.Config.MaxInFlight != 0 || removed.Config.Rate != 0 || removed.Config.Filter != "" {
		t.Fatalf("removed %+v %v", removed, err)
	}
}
