// Package poolref names this provider's pools the way claims and IPAddresses
// refer to them, so the controllers and the webhook agree on which objects
// belong to which pool.
package poolref

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// Key names a pool across both kinds; Namespace is empty for a global pool.
type Key struct {
	Kind      string
	Namespace string
	Name      string
}

// Parse reads a Key back from its String form.
func Parse(s string) (Key, bool) {
	parts := strings.Split(s, "/")
	if _, ok := New(parts[0]); !ok {
		return Key{}, false
	}
	switch {
	case len(parts) == 2 && parts[0] == v1alpha1.GlobalMetalVRFIPPoolKind:
		return Key{Kind: parts[0], Name: parts[1]}, true
	case len(parts) == 3 && parts[0] == v1alpha1.MetalVRFIPPoolKind:
		return Key{Kind: parts[0], Namespace: parts[1], Name: parts[2]}, true
	}
	return Key{}, false
}

// ObjectKey is the key to read the pool with.
func (k Key) ObjectKey() types.NamespacedName {
	return types.NamespacedName{Namespace: k.Namespace, Name: k.Name}
}

func (k Key) String() string {
	if k.Namespace == "" {
		return k.Kind + "/" + k.Name
	}
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// New returns an empty pool of the given kind, or false for a kind this
// provider does not serve.
func New(kind string) (v1alpha1.Pool, bool) {
	switch kind {
	case v1alpha1.MetalVRFIPPoolKind:
		return &v1alpha1.MetalVRFIPPool{}, true
	case v1alpha1.GlobalMetalVRFIPPoolKind:
		return &v1alpha1.GlobalMetalVRFIPPool{}, true
	}
	return nil, false
}

// NewList returns an empty list of pools of the given kind, which must be
// one this provider serves.
func NewList(kind string) client.ObjectList {
	if kind == v1alpha1.GlobalMetalVRFIPPoolKind {
		return &v1alpha1.GlobalMetalVRFIPPoolList{}
	}
	return &v1alpha1.MetalVRFIPPoolList{}
}

// KindOf returns a pool's kind from its Go type: objects read from the cache
// may carry no TypeMeta.
func KindOf(pool v1alpha1.Pool) string {
	if _, global := pool.(*v1alpha1.GlobalMetalVRFIPPool); global {
		return v1alpha1.GlobalMetalVRFIPPoolKind
	}
	return v1alpha1.MetalVRFIPPoolKind
}

// KeyOf names a pool.
func KeyOf(pool v1alpha1.Pool) Key {
	return Key{Kind: KindOf(pool), Namespace: pool.GetNamespace(), Name: pool.GetName()}
}

// For names the pool that a claim or an IPAddress in namespace refers to, or
// returns false when the reference names another provider's pool.
func For(ref ipamv1.IPPoolReference, namespace string) (Key, bool) {
	if ref.APIGroup != v1alpha1.GroupVersion.Group {
		return Key{}, false
	}
	switch ref.Kind {
	case v1alpha1.MetalVRFIPPoolKind:
		return Key{Kind: ref.Kind, Namespace: namespace, Name: ref.Name}, true
	case v1alpha1.GlobalMetalVRFIPPoolKind:
		return Key{Kind: ref.Kind, Name: ref.Name}, true
	}
	if kind := CompanionKind(ref.Kind); kind != "" {
		// An adopted in-cluster pool is served through its companion
		// (docs/adoption.md); whether it is adopted is the controllers'
		// question (see Adopted), not this mapping's.
		if kind == v1alpha1.GlobalMetalVRFIPPoolKind {
			namespace = ""
		}
		return Key{Kind: kind, Namespace: namespace, Name: CompanionName(ref.Kind, ref.Name)}, true
	}
	return Key{}, false
}

// Adopted reports whether ref names an in-cluster provider's pool
// (InClusterIPPool, GlobalInClusterIPPool, InClusterPrefixPool,
// GlobalInClusterPrefixPool), which this provider serves only once it is
// adopted.
func Adopted(ref ipamv1.IPPoolReference) bool {
	return ref.APIGroup == v1alpha1.GroupVersion.Group && CompanionKind(ref.Kind) != ""
}

// CompanionKind is the kind of the pool that serves an adopted in-cluster
// pool of the given kind: a MetalVRFIPPool for a namespaced one, a
// GlobalMetalVRFIPPool for a cluster-scoped one (the prefix kinds' in
// prefix mode); "" for any other kind.
func CompanionKind(inClusterKind string) string {
	switch inClusterKind {
	case v1alpha1.InClusterIPPoolKind, v1alpha1.InClusterPrefixPoolKind:
		return v1alpha1.MetalVRFIPPoolKind
	case v1alpha1.GlobalInClusterIPPoolKind, v1alpha1.GlobalInClusterPrefixPoolKind:
		return v1alpha1.GlobalMetalVRFIPPoolKind
	}
	return ""
}

// CompanionName is the name of the pool that serves the adopted in-cluster
// pool of the given kind and name: incluster-<name> for an address pool
// (the name every adoption made before prefix pools has),
// inclusterprefix-<name> for a prefix pool, so that the two kinds of one
// name never share a companion.
func CompanionName(inClusterKind, name string) string {
	if IsPrefixKind(inClusterKind) {
		return v1alpha1.AdoptedPrefixPoolPrefix + name
	}
	return v1alpha1.AdoptedPoolPrefix + name
}

// IsPrefixKind reports whether an in-cluster pool kind hands out prefixes.
func IsPrefixKind(inClusterKind string) bool {
	return inClusterKind == v1alpha1.InClusterPrefixPoolKind || inClusterKind == v1alpha1.GlobalInClusterPrefixPoolKind
}

// IsCompanionName reports whether a pool name is one CompanionName gives.
func IsCompanionName(name string) bool {
	return strings.HasPrefix(name, v1alpha1.AdoptedPoolPrefix) || strings.HasPrefix(name, v1alpha1.AdoptedPrefixPoolPrefix)
}

// AdoptedFrom returns the in-cluster pool a companion serves (of its
// namespace for a MetalVRFIPPool), or false when pool is no companion: its
// annotation must name a kind this pool's kind serves, and the pool must
// bear that pool's companion name.
func AdoptedFrom(pool v1alpha1.Pool) (ipamv1.IPPoolReference, bool) {
	kind, name, ok := strings.Cut(pool.GetAnnotations()[v1alpha1.AdoptedFromAnnotation], "/")
	if !ok || CompanionKind(kind) != KindOf(pool) || CompanionName(kind, name) != pool.GetName() {
		return ipamv1.IPPoolReference{}, false
	}
	return ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: name}, true
}

// AddressBelongsTo reports whether an IPAddress was allocated from pool.
func AddressBelongsTo(address *ipamv1.IPAddress, pool v1alpha1.Pool) bool {
	key, ok := For(address.Spec.PoolRef, address.Namespace)
	return ok && key == KeyOf(pool)
}
