package controllers

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// TestAPoolReadsItsVRFOncePerResync: a pool reconciled again and again (its
// counts change with every claim) reads its VRF, through its Secret and the
// Metal API, once per resync period; a change of its spec or annotations,
// or the period passing, reads again; a failed read is not kept.
func TestAPoolReadsItsVRFOncePerResync(t *testing.T) {
	s, err := simtest.Start(sim.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "metal"},
		Data:       map[string][]byte{"apiKey": []byte(simtest.APIKey), "baseURL": []byte(s.URL)},
	}
	endpoints, err := metal.NewEndpoints(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	r := &sourceResolver{
		reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(secret).Build(),
		metal:  metal.NewClientCache(metal.Config{}, metal.CacheOptions{Endpoints: endpoints}),
		maxAge: 10 * time.Minute,
		now:    func() time.Time { return now },
	}
	pool := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "p-uid", Generation: 1},
		Spec: v1alpha1.MetalVRFIPPoolSpec{VRF: &v1alpha1.VRFSource{
			ID: simtest.VRF, CredentialsRef: v1alpha1.SecretReference{Name: "metal"},
			ProjectID: simtest.Project, Metro: simtest.Metro, ReservationIDs: []string{simtest.NodesReservation},
		}},
	}
	reads := func() int { return s.Calls(sim.OpFindVrfByID) }
	resolve := func(what string, want int) {
		t.Helper()
		results, err := r.resolve(context.Background(), pool)
		if err != nil || len(results) != 1 {
			t.Fatalf("%s: %v, %v", what, results, err)
		}
		if got := reads(); got != want {
			t.Errorf("%s: the VRF was read %d times in all, want %d", what, got, want)
		}
	}

	resolve("the first reconcile", 1)
	for range 10 {
		resolve("a reconcile of the counts", 1)
	}
	pool.Annotations = map[string]string{"touched": "now"}
	resolve("touching the pool", 2)
	pool.Generation = 2
	resolve("a change of the spec", 3)
	now = now.Add(10 * time.Minute)
	resolve("the resync period over", 4)

	s.FailNext(sim.OpFindVrfByID, 1_000_000, http.StatusInternalServerError, 0)
	now = now.Add(10 * time.Minute)
	if results, _ := r.resolve(context.Background(), pool); results[0].failure == nil {
		t.Fatal("the failure was not seen")
	}
	s.ClearFaults()
	resolve("the reconcile after a failure", reads()+1)
	resolve("the one after it", reads())
}
