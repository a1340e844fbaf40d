package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// stormed is what a storm of one route measured.
type stormed struct {
	lat     []time.Duration
	answers map[string]int
	// extra is the effects beyond one per key; differing the keys whose
	// final answers (the storm's and the follow-up's) differ; effectless
	// the keys answered 2xx without an effect.
	extra, differing, effectless int
}

// storms sends, for each endpoint and for the bench's route without
// idempotency, StormKeys keys StormDuplicates times each, all of a wave of
// StormWave keys at once, then one follow-up per key, and counts what
// happened.
func (d *door) storms(ctx context.Context, rep *Report) error {
	s := d.opts.Settings
	bareEndpoint := &endpoint{name: "bench payments", path: bareResource,
		prepare: endpoints[0].prepare,
		effects: func(ctx context.Context, e *env, prefix string, reqs []request) ([]int, error) {
			return byCustomer(ctx, e, e.cfg.Table("PaymentsTable"), prefix, reqs)
		},
	}
	base, err := d.storm(ctx, bareEndpoint)
	if err != nil {
		return err
	}
	baseRow := base.row("POST "+bareResource+" (no idempotency)", s)
	baseRow.Baseline = true
	rep.Rows = append(rep.Rows, baseRow)
	for _, e := range endpoints {
		st, err := d.storm(ctx, e)
		if err != nil {
			return err
		}
		row := st.row("POST "+e.path, s)
		row.compare(baseRow, FigExtra, FigP50, FigP99)
		rep.Rows = append(rep.Rows, row)
	}
	return nil
}

func (st *stormed) row(name string, s Settings) Row {
	return Row{Group: stormGroup, Case: fmt.Sprintf("%s, %d keys × %d", name, s.StormKeys, s.StormDuplicates),
		N: len(st.lat), Answers: st.answers,
		Figures: map[string]float64{
			FigExtra: float64(st.extra), FigDiffering: float64(st.differing), FigEffectless: float64(st.effectless),
			FigP50: ms(quantile(st.lat, 0.50)), FigP99: ms(quantile(st.lat, 0.99)),
		}}
}

// storm storms e's route.
func (d *door) storm(ctx context.Context, e *endpoint) (*stormed, error) {
	s := d.opts.Settings
	prefix := d.tag("storm") + "-"
	reqs := make([]request, s.StormKeys)
	d.opts.progress("storm: %s: preparing %d keys", e.path, s.StormKeys)
	for i := range reqs {
		var err error
		if reqs[i], err = e.prepare(ctx, d.env, fmt.Sprintf("%s%d", prefix, i)); err != nil {
			return nil, err
		}
	}
	d.opts.progress("storm: %s: %d keys × %d", e.path, s.StormKeys, s.StormDuplicates)
	st := &stormed{answers: map[string]int{}}
	finals := make([]map[string]bool, len(reqs))
	var mu sync.Mutex
	var errs []error
	for w := 0; w < len(reqs); w += s.StormWave {
		wave := reqs[w:min(w+s.StormWave, len(reqs))]
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, req := range wave {
			k := w + i
			finals[k] = map[string]bool{}
			for range s.StormDuplicates {
				wg.Go(func() {
					<-start
					t := time.Now()
					a, err := d.post(ctx, e.path, req.key, req.body)
					lat := time.Since(t)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
						return
					}
					st.lat = append(st.lat, lat)
					st.answers[a.label()]++
					if a.final() {
						finals[k][fmt.Sprint(a.status, a.body)] = true
					}
				})
			}
		}
		close(start)
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bench: storm of %s: %w", e.path, err)
	}
	// The follow-up: one more request per key, once the storm is over,
	// which must answer what the storm did.
	for k, req := range reqs {
		a, err := d.post(ctx, e.path, req.key, req.body)
		if err != nil {
			return nil, err
		}
		if a.final() {
			finals[k][fmt.Sprint(a.status, a.body)] = true
		} else {
			st.answers["follow-up "+a.label()]++
		}
	}
	effects, err := e.effects(ctx, d.env, prefix, reqs)
	if err != nil {
		return nil, err
	}
	for k := range reqs {
		st.extra += max(0, effects[k]-1)
		if len(finals[k]) > 1 {
			st.differing++
		}
		if effects[k] == 0 {
			st.effectless++
		}
	}
	return st, nil
}
