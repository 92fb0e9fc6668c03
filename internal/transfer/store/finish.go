package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// FinishOne is a store's Finish done by its FinishAll with one ending.
func FinishOne(ctx context.Context, finishAll func(ctx context.Context, owner string, outs []Ending) ([]error, error),
	owner string, a Attempt, next FileState, notBefore time.Time) error {
	errs, err := finishAll(ctx, owner, []Ending{{Attempt: a, Next: next, NotBefore: notBefore}})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return fmt.Errorf("finish %s/%d by %s: %w", a.Job, a.Index, owner, err)
	}
	return nil
}

// CheckEndings refuses endings whose next state Finish does not take.
func CheckEndings(outs []Ending) error {
	for _, o := range outs {
		if err := o.CheckNext(); err != nil {
			return err
		}
	}
	return nil
}

// FinishEach is the loop of a store's FinishAll inside its transaction:
// one records ending i; a refusal (ErrLeaseLost, ErrNotFound: nothing
// written for it) is kept in errs[i] and the loop goes on; any other
// error ends it and is returned (the transaction is rolled back). The
// endings are taken in order (indexes into errs), or as given when
// order is nil.
func FinishEach(order []int, errs []error, one func(i int) error) error {
	if order == nil {
		order = make([]int, len(errs))
		for i := range order {
			order[i] = i
		}
	}
	for _, i := range order {
		errs[i] = one(i)
		if errs[i] != nil && !errors.Is(errs[i], ErrLeaseLost) && !errors.Is(errs[i], ErrNotFound) {
			return errs[i]
		}
	}
	return nil
}

// CheckNext refuses a next state other than FINISHED, FAILED or
// SUBMITTED, and a move to another source but with SUBMITTED.
func (o Ending) CheckNext() error {
	if o.Next != FileFinished && o.Next != FileFailed && o.Next != FileSubmitted {
		return fmt.Errorf("finish %s/%d: next state %q: want FINISHED, FAILED or SUBMITTED", o.Attempt.Job, o.Attempt.Index, o.Next)
	}
	if o.Advance && o.Next != FileSubmitted {
		return fmt.Errorf("finish %s/%d: a move to another source goes with SUBMITTED, not %s", o.Attempt.Job, o.Attempt.Index, o.Next)
	}
	return nil
}
