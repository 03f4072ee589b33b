package registry

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// ensureSeeded loads the pool's domain, then the pool, from the store, once.
// The caller holds the domain's lock.
func (r *Registry) ensureSeeded(ctx context.Context, ps *poolState) error {
	d := ps.domain
	if d.held == nil {
		if err := d.load(ctx, r.store); err != nil {
			return fmt.Errorf("reading the addresses in use in domain %s: %w", d.key, err)
		}
	}
	if ps.byClaim == nil {
		if err := d.loadPool(ctx, r.store, ps); err != nil {
			return fmt.Errorf("reading the addresses in use of %s: %w", ps.key, err)
		}
	}
	return nil
}

// load reads the addresses in use in the domain: its records, and the
// IPAddresses of its pools that have none yet, for which it creates them.
func (d *domain) load(ctx context.Context, store Store) error {
	held := newHoldings()
	if d.allocates {
		records, err := store.Records(ctx, d.key)
		if err != nil {
			return err
		}
		for _, rec := range records {
			held.set(rec.Address, rec.Holder)
		}
		addresses, err := store.Addresses(ctx, d.key)
		if err != nil {
			return err
		}
		if err := recordMissing(ctx, store, d.key, held, addresses); err != nil {
			return err
		}
	}
	d.held = held
	return nil
}

// loadPool adds a pool joining the domain: its IPAddresses without a record
// get one, and the records of the domain that name it are its claims'.
func (d *domain) loadPool(ctx context.Context, store Store, ps *poolState) error {
	addresses, err := store.PoolAddresses(ctx, ps.key)
	if err != nil {
		return err
	}
	if d.allocates {
		if err := recordMissing(ctx, store, d.key, d.held, addresses); err != nil {
			return err
		}
	} else {
		for _, rec := range addresses {
			if _, ok := d.held.get(rec.Address); !ok {
				d.held.set(rec.Address, rec.Holder)
			}
		}
	}
	ps.byClaim = map[Claim]netip.Addr{}
	for ip, h := range d.held.all() {
		if h.Pool == ps.key && !h.Retired {
			ps.byClaim[h.Claim] = ip
		}
	}
	d.pools[ps.key] = ps
	return nil
}

// recordWorkers bounds the records created at once when seeding.
const recordWorkers = 16

// recordMissing creates the records of addresses missing from held, and
// adds them to it; an address another claim recorded first stays that
// claim's.
func recordMissing(ctx context.Context, store Store, domain string, held *holdings, addresses []Record) error {
	var missing []Record
	for _, rec := range addresses {
		if _, ok := held.get(rec.Address); !ok {
			missing = append(missing, rec)
			held.set(rec.Address, rec.Holder) // one record per address even if two IPAddresses share it
		}
	}
	errs := make([]error, len(missing))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(recordWorkers, len(missing)) {
		wg.Go(func() {
			for i := range work {
				errs[i] = store.Reserve(ctx, domain, missing[i])
			}
		})
	}
	for i := range missing {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, err := range errs {
		var taken *TakenError
		switch {
		case err == nil:
		case errors.As(err, &taken):
			held.set(missing[i].Address, taken.Holder)
		default:
			return err
		}
	}
	return nil
}
