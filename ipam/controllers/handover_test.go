package controllers

import (
	"errors"
	"strings"
	"testing"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// TestCheckToken: a copy takes over only with the token whose hash it
// carries; the forms a forger can make from what the copy shows (the
// allocating cluster's identity, the hash itself) are refused, and so is
// any token when the copy carries no hash.
func TestCheckToken(t *testing.T) {
	const token = "3f9a0c"
	stamped := map[string]string{
		v1alpha1.AllocatingClusterAnnotation: "source-cluster",
		v1alpha1.HandoverHashAnnotation:      hashOf(token),
	}
	for name, tc := range map[string]struct {
		annotations map[string]string
		token       string
		want        error
	}{
		"the token":                         {annotations: stamped, token: token},
		"the allocating cluster, dot, any":  {annotations: stamped, token: "source-cluster.forged-by-a-tenant", want: errWrongToken},
		"the hash as the token":             {annotations: stamped, token: hashOf(token), want: errWrongToken},
		"empty":                             {annotations: stamped, token: "", want: errWrongToken},
		"the token with a trailing newline": {annotations: stamped, token: token + "\n", want: errWrongToken},
		"a copy without a hash":             {annotations: map[string]string{v1alpha1.AllocatingClusterAnnotation: "source-cluster"}, token: token, want: errNoHandoverHash},
		"a hash that is not hex":            {annotations: map[string]string{v1alpha1.HandoverHashAnnotation: strings.Repeat("z", 64)}, token: token, want: errNoHandoverHash},
		"a hash of another length":          {annotations: map[string]string{v1alpha1.HandoverHashAnnotation: hashOf(token)[:32]}, token: token, want: errNoHandoverHash},
	} {
		t.Run(name, func(t *testing.T) {
			if err := checkToken(tc.annotations, tc.token); !errors.Is(err, tc.want) {
				t.Errorf("checkToken(%q) = %v, want %v", tc.token, err, tc.want)
			}
		})
	}
}
