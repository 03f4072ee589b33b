package device

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestOwned(t *testing.T) {
	live := map[string]bool{"uid-live": true}
	owner := Owner{Project: "p1", UID: "uid-me", Name: "m1", Cluster: "c1", Namespace: "team-a", Exists: func(uid string) bool { return live[uid] }}
	ours := Tags(nil, owner, false)
	moved := []string{MachineTagPrefix + "uid-gone", ClusterTagPrefix + "c1", NamespaceTagPrefix + "team-a"}
	upstream := []string{"capp:machine-uid:m1", "capp:cluster-id:c1", "capp:namespace:team-a", "kubernetes.io/role:node"}
	tests := []struct {
		name    string
		project string
		tags    []string
		why     string // "" when owned
	}{
		{"created for this machine", "p1", ours, ""},
		{"created for this machine, in another project", "p2", ours, "in project p2, not in project p1"},
		{"moved: the machine that tagged it is gone", "p1", moved, ""},
		{"another live machine's, same cluster and namespace", "p1",
			[]string{MachineTagPrefix + "uid-live", ClusterTagPrefix + "c1", NamespaceTagPrefix + "team-a"}, "still exists"},
		{"another namespace's cluster of the same name", "p1",
			[]string{MachineTagPrefix + "uid-gone", ClusterTagPrefix + "c1", NamespaceTagPrefix + "team-b"}, "lacks the tag"},
		{"created before the namespace tag", "p1", []string{MachineTagPrefix + "uid-gone", ClusterTagPrefix + "c1"}, "lacks the tag"},
		{"no tags at all", "p1", nil, "no tags"},
		{"upstream CAPP's, for this machine", "p1", upstream, ""},
		{"upstream CAPP's, another machine's", "p1", []string{"capp:machine-uid:m2", "capp:cluster-id:c1", "capp:namespace:team-a"}, "lacks the tag"},
		{"upstream CAPP's, another namespace's", "p1", []string{"capp:machine-uid:m1", "capp:cluster-id:c1", "capp:namespace:team-b"}, "lacks the tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Owned("device", "d1", tt.project, tt.tags, MachineTagPrefix, owner)
			if tt.why == "" {
				if err != nil {
					t.Fatalf("Owned() = %v, want owned", err)
				}
				return
			}
			nerr, ok := errors.AsType[*NotOwnedError](err)
			if !ok || !strings.Contains(err.Error(), tt.why) || nerr.ID != "d1" {
				t.Fatalf("Owned() = %v, want a NotOwnedError saying %q", err, tt.why)
			}
		})
	}
}

func TestOwnedReservation(t *testing.T) {
	owner := Owner{Project: "p1", UID: "pc-uid", Cluster: "c1", Namespace: "team-a", Exists: func(string) bool { return false }}
	if err := Owned("reservation", "r1", "p1", []string{EndpointTagPrefix + "pc-uid"}, EndpointTagPrefix, owner); err != nil {
		t.Errorf("the cluster's own reservation: %v", err)
	}
	// Upstream's device tags never make a reservation the cluster's.
	if err := Owned("reservation", "r1", "p1", []string{"capp:cluster-id:c1"}, EndpointTagPrefix, owner); err == nil {
		t.Error("a reservation with upstream's cluster tag only was taken as the cluster's")
	}
	if err := Owned("reservation", "r1", "p1", []string{EndpointTagPrefix + "other"}, EndpointTagPrefix, owner); err == nil {
		t.Error("another cluster's reservation was taken as this one's")
	}
}

func TestReservedTagPrefixes(t *testing.T) {
	owner := Owner{UID: "u", Cluster: "c", Namespace: "n"}
	for _, tag := range Tags(nil, owner, true) {
		if tag == ControlPlaneTag {
			continue
		}
		if !Reserved(tag) {
			t.Errorf("the provider's tag %s is not reserved", tag)
		}
	}
	for _, tag := range []string{"capp:machine-uid:m", "capp:cluster-id:c", "capp:namespace:n"} {
		if !Reserved(tag) {
			t.Errorf("upstream's tag %s is not reserved", tag)
		}
	}
	for _, tag := range []string{"team:storage", "capp:other", "kubernetes.io/role:node"} {
		if Reserved(tag) {
			t.Errorf("the user's tag %s is reserved", tag)
		}
	}
	forged := Tags([]string{"team:storage", MachineTagPrefix + "victim"}, owner, false)
	if !slices.Equal(forged, []string{"team:storage", MachineTagPrefix + "u", ClusterTagPrefix + "c", NamespaceTagPrefix + "n", WorkerTag}) {
		t.Errorf("Tags() kept a reserved user tag: %v", forged)
	}
}
