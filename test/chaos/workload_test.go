package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// The client's churn: claimsPerSecond new claims, deleteShare of them
// deleted again later, recreateShare of those recreated under the same name
// once the old claim is gone.
const (
	claimsPerSecond = 5
	deleteShare     = 0.3
	recreateShare   = 0.5
)

// target is a pool claims are spread over, weight being its share.
type target struct {
	ref    ipamv1.IPPoolReference
	weight float64
}

// workload creates, deletes and recreates claims in one namespace.
type workload struct {
	c       client.Client
	ns      string
	targets []target
	rng     *rand.Rand

	next int
	// live are claims created and not deleted, by name.
	live map[string]ipamv1.IPPoolReference
	// recreate are deleted claims to create again under the same name.
	recreate map[string]ipamv1.IPPoolReference

	created, deleted, recreated int
}

func newWorkload(c client.Client, ns string, seed uint64, targets ...target) *workload {
	return &workload{
		c: c, ns: ns, targets: targets, rng: rand.New(rand.NewPCG(seed, seed)),
		live: map[string]ipamv1.IPPoolReference{}, recreate: map[string]ipamv1.IPPoolReference{},
	}
}

// run churns until ctx is done, returning the first error other than the
// ones churn expects (a recreated claim whose predecessor still exists).
func (w *workload) run(ctx context.Context) error {
	tick := time.NewTicker(time.Second / claimsPerSecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := w.step(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// step creates one claim, deletes one with deleteShare's probability, and
// tries to recreate one deleted earlier.
func (w *workload) step(ctx context.Context) error {
	name := fmt.Sprintf("claim-%05d", w.next)
	w.next++
	ref := w.pick()
	if err := w.create(ctx, name, ref); err != nil {
		return err
	}
	w.created++
	w.live[name] = ref

	if w.rng.Float64() < deleteShare {
		victim, ref := w.any(w.live)
		claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: victim}}
		if err := w.c.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting claim %s: %w", victim, err)
		}
		w.deleted++
		delete(w.live, victim)
		if w.rng.Float64() < recreateShare {
			w.recreate[victim] = ref
		}
	}

	if name, ref := w.any(w.recreate); name != "" {
		switch err := w.create(ctx, name, ref); {
		case apierrors.IsAlreadyExists(err):
			// Still being released; tried again on a later step.
		case err != nil:
			return err
		default:
			w.recreated++
			delete(w.recreate, name)
			w.live[name] = ref
		}
	}
	return nil
}

func (w *workload) create(ctx context.Context, name string, ref ipamv1.IPPoolReference) error {
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec:       ipamv1.IPAddressClaimSpec{PoolRef: ref},
	}
	if err := w.c.Create(ctx, claim); err != nil {
		return fmt.Errorf("creating claim %s: %w", name, err)
	}
	return nil
}

// pick chooses a pool by weight.
func (w *workload) pick() ipamv1.IPPoolReference {
	x := w.rng.Float64()
	for _, t := range w.targets {
		if x < t.weight {
			return t.ref
		}
		x -= t.weight
	}
	return w.targets[len(w.targets)-1].ref
}

// any returns a random entry of m, or "" when it is empty.
func (w *workload) any(m map[string]ipamv1.IPPoolReference) (string, ipamv1.IPPoolReference) {
	if len(m) == 0 {
		return "", ipamv1.IPPoolReference{}
	}
	i := w.rng.IntN(len(m))
	var name string
	var ref ipamv1.IPPoolReference
	for name, ref = range m {
		if i == 0 {
			break
		}
		i--
	}
	return name, ref
}

// poolRef refers to a pool of ours.
func poolRef(kind, name string) ipamv1.IPPoolReference {
	return ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: name}
}
