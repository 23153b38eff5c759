package queuecore

import "context"

// Iter walks every item of a paged list, fetching pages as it goes:
//
//	it := client.Topics.List(ctx, nil)
//	for it.Next() {
//		topic := it.Current()
//		…
//	}
//	if err := it.Err(); err != nil { … }
type Iter[T any] struct {
	ctx    context.Context
	fetch  func(ctx context.Context, cursor string) ([]T, string, error)
	page   []T
	i      int
	cursor string
	done   bool
	err    error
	cur    T
}

func newIter[T any](ctx context.Context, fetch func(ctx context.Context, cursor string) ([]T, string, error)) *Iter[T] {
	return &Iter[T]{ctx: ctx, fetch: fetch}
}

// Next moves to the next item, fetching the next page when needed; false at the end or on an error.
func (it *Iter[T]) Next() bool {
	for it.i >= len(it.page) {
		if it.done || it.err != nil {
			return false
		}
		page, next, err := it.fetch(it.ctx, it.cursor)
		if err != nil {
			it.err = err
			return false
		}
		it.page, it.i, it.cursor = page, 0, next
		it.done = next == ""
	}
	it.cur = it.page[it.i]
	it.i++
	return true
}

// Current is the item Next moved to.
func (it *Iter[T]) Current() T { return it.cur }

// Err is the error that stopped the iteration, nil at a normal end.
func (it *Iter[T]) Err() error { return it.err }

// All collects every remaining item.
func (it *Iter[T]) All() ([]T, error) {
	var all []T
	for it.Next() {
		all = append(all, it.Current())
	}
	return all, it.Err()
}

// ListParams pages a list: Limit items per page (the server's default when 0), from Cursor.
type ListParams struct {
	Limit  int
	Cursor string
}

func (p *ListParams) query() map[string][]string {
	q := map[string][]string{}
	if p != nil && p.Limit > 0 {
		q["limit"] = []string{itoa(p.Limit)}
	}
	return q
}

// failedIter is an iterator that yields nothing and reports err (a bad per-call option).
func failedIter[T any](ctx context.Context, err error) *Iter[T] {
	return &Iter[T]{ctx: ctx, err: err}
}
