package controllers

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// handoverTokens keeps the hand-over token of each global pool this
// management cluster allocates from, one Secret per pool in the manager's
// namespace (where only the cluster's administrators read Secrets). Only
// the token's hash goes on the pool, which `clusterctl move` copies: a
// copy can check a token but not make one.
type handoverTokens struct {
	// reader reads the Secrets live: the manager caches no Secret.
	reader    client.Reader
	client    client.Client
	namespace string
}

// secretKey is where the token of pool is kept.
func (h handoverTokens) secretKey(pool v1alpha1.Pool) client.ObjectKey {
	return client.ObjectKey{Namespace: h.namespace, Name: "handover-" + string(pool.GetUID())}
}

// token returns pool's token, making it (and its Secret, owned by the pool
// so that it goes with it) on the first call.
func (h handoverTokens) token(ctx context.Context, pool v1alpha1.Pool) (string, error) {
	key := h.secretKey(pool)
	secret := &corev1.Secret{}
	err := h.reader.Get(ctx, key, secret)
	switch {
	case err == nil:
		if token := string(secret.Data[v1alpha1.HandoverTokenKey]); token != "" {
			return token, nil
		}
		return "", fmt.Errorf("secret %s holds no %s", key, v1alpha1.HandoverTokenKey)
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading the hand-over token of %s: %w", pool.GetName(), err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a hand-over token: %w", err)
	}
	token := hex.EncodeToString(b)
	secret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: poolref.KindOf(pool), Name: pool.GetName(), UID: pool.GetUID(),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{v1alpha1.HandoverTokenKey: []byte(token)},
	}
	if err := h.client.Create(ctx, secret); err != nil {
		// A create that lost a race, or whose answer was lost: the next
		// reconcile reads the Secret that exists.
		return "", fmt.Errorf("keeping the hand-over token of %s in secret %s: %w", pool.GetName(), key, err)
	}
	return token, nil
}

// hashOf is the hash of a token as HandoverHashAnnotation holds it.
func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

var (
	// errNoHandoverHash: the copy was made before its pool carried a hash.
	errNoHandoverHash = errors.New("the pool carries no valid " + v1alpha1.HandoverHashAnnotation)
	errWrongToken     = errors.New("it is not the token of the pool's hand-over")
)

// checkToken reports whether token is the one whose hash the pool's copy
// carries, in constant time: how much of a guess matches must not show.
func checkToken(annotations map[string]string, token string) error {
	want, err := hex.DecodeString(annotations[v1alpha1.HandoverHashAnnotation])
	if err != nil || len(want) != sha256.Size {
		return errNoHandoverHash
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(want, got[:]) != 1 {
		return errWrongToken
	}
	return nil
}
