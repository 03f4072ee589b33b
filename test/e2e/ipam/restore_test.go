package ipam

import (
	"fmt"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// asRestored is obj as a backup tool creates it again: no UID, resource
// version, creation time or status (Velero restores status only when told),
// and owner references kept only when preserve is set, still naming the
// UIDs of the objects that were backed up.
func asRestored[T client.Object](obj T, preserve bool) T {
	obj = obj.DeepCopyObject().(T)
	obj.SetUID("")
	obj.SetResourceVersion("")
	obj.SetCreationTimestamp(metav1.Time{})
	obj.SetManagedFields(nil)
	obj.SetDeletionTimestamp(nil)
	obj.SetGeneration(0)
	if !preserve {
		obj.SetOwnerReferences(nil)
	}
	return obj
}

// setPaused sets or removes Cluster API's paused annotation on obj.
func setPaused(obj client.Object, paused bool) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	base := obj.DeepCopyObject().(client.Object)
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	if paused {
		annotations[clusterv1.PausedAnnotation] = ""
	} else {
		delete(annotations, clusterv1.PausedAnnotation)
	}
	obj.SetAnnotations(annotations)
	Expect(k8s.Patch(ctx, obj, client.MergeFrom(base))).To(Succeed())
}

var _ = Describe("A restore from a backup (docs/reliability.md, \"Backup and restore\")", func() {
	DescribeTable("keeps every claim's address, with new UIDs, the pools restored and paused first and the claims before their IPAddresses",
		func(preserveOwners bool) {
			ns := newNamespace()
			global := "restore-" + strings.TrimPrefix(ns, "ipam-")
			pools := []client.Object{
				createPool(ns, "nodes", poolSpec(24, "10.61.0.1", "10.61.0.2-10.61.0.9")),
				createGlobalPool(global, poolSpec(24, "10.62.0.1", "10.62.0.2-10.62.0.9")),
			}
			var claims []*ipamv1.IPAddressClaim
			for i := range 4 {
				claims = append(claims, createClaim(ns, fmt.Sprintf("node-%d", i), v1alpha1.MetalVRFIPPoolKind, "nodes"))
			}
			for i := range 3 {
				claims = append(claims, createClaim(ns, fmt.Sprintf("vip-%d", i), v1alpha1.GlobalMetalVRFIPPoolKind, global))
			}
			// The lowest addresses go to claims deleted before the backup: a
			// claim served anew after the restore would get one of them, not
			// the address it held.
			for _, claim := range claims[:2] {
				boundAddress(claim)
				deleteAndWait(claim)
			}
			for _, claim := range claims[4:5] {
				boundAddress(claim)
				deleteAndWait(claim)
			}
			claims = slices.Concat(claims[2:4], claims[5:])
			for i := range 2 {
				claims = append(claims, createClaim(ns, fmt.Sprintf("node-%d", i+4), v1alpha1.MetalVRFIPPoolKind, "nodes"))
			}
			held := map[string]string{}
			var addresses []*ipamv1.IPAddress
			for _, claim := range claims {
				address := boundAddress(claim)
				held[claim.Name] = address.Spec.Address
				addresses = append(addresses, address)
			}
			By("backing up: the pools, the claims and their IPAddresses as the API server has them")
			var backup []client.Object
			for _, pool := range pools {
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
				backup = append(backup, pool.DeepCopyObject().(client.Object))
			}
			for _, claim := range claims {
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			}

			By("losing them: the claims are deleted (their addresses released), then the pools")
			for _, claim := range claims {
				deleteAndWait(claim)
			}
			Eventually(func(g Gomega) []ipamv1.IPAddress {
				list := &ipamv1.IPAddressList{}
				g.Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
				return list.Items
			}).Should(BeEmpty())
			for _, pool := range pools {
				deleteAndWait(pool)
			}

			By("restoring the pools, and pausing them")
			for _, pool := range backup {
				restored := asRestored(pool, preserveOwners)
				Expect(k8s.Create(ctx, restored)).To(Succeed())
				setPaused(restored, true)
			}
			By("restoring the claims, then the IPAddresses (Velero's order: ipaddressclaims before ipaddresses), under the garbage collector")
			for _, claim := range claims {
				Expect(k8s.Create(ctx, asRestored(claim, preserveOwners))).To(Succeed())
			}
			restoredUIDs := map[string]string{}
			for _, address := range addresses {
				restored := asRestored(address, preserveOwners)
				if preserveOwners {
					// Kept, its owner references all name the backup's UIDs:
					// the garbage collector would delete it at once. Refused,
					// with nothing recorded, and restored as the procedure
					// says: without them.
					Expect(k8s.Create(ctx, restored)).To(MatchError(And(ContainSubstring("metadata.ownerReferences"), ContainSubstring("garbage collector"))),
						"IPAddress %s, whose owners are all gone, was admitted", address.Name)
					Expect(env.AllocationRecords(ctx, ns)).NotTo(HaveKey(address.Spec.Address), "a refused IPAddress left a record")
					restored = asRestored(address, false)
				}
				Expect(k8s.Create(ctx, restored)).To(Succeed())
				restoredUIDs[restored.Name] = string(restored.UID)
			}
			By("pointing each IPAddress's owner reference at its claim as restored, as clusterctl move does")
			for _, address := range addresses {
				claim := &ipamv1.IPAddressClaim{}
				Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: address.Spec.ClaimRef.Name}, claim)).To(Succeed())
				restored := &ipamv1.IPAddress{}
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(address), restored)).To(Succeed())
				base := restored.DeepCopy()
				restored.OwnerReferences = []metav1.OwnerReference{{
					APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID,
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
				}}
				Expect(k8s.Patch(ctx, restored, client.MergeFrom(base))).To(Succeed())
			}
			By("resuming the pools")
			for _, pool := range backup {
				setPaused(asRestored(pool, false), false)
			}

			By("every claim is bound to the address it held, under its new UID")
			Eventually(func(g Gomega) map[string]string {
				bound := map[string]string{}
				for _, claim := range claims {
					live := &ipamv1.IPAddressClaim{}
					g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(claim), live)).To(Succeed())
					if live.Status.AddressRef.Name == "" {
						continue
					}
					address := &ipamv1.IPAddress{}
					g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: live.Status.AddressRef.Name}, address)).To(Succeed())
					g.Expect(address.OwnerReferences).To(ContainElement(HaveField("UID", live.UID)), "IPAddress %s owned by the live claim", address.Name)
					g.Expect(string(address.UID)).To(Equal(restoredUIDs[address.Name]), "claim %s bound to the IPAddress restored", claim.Name)
					g.Expect(address.DeletionTimestamp).To(BeNil(), "IPAddress %s is being deleted (by the garbage collector: its owners were gone)", address.Name)
					bound[claim.Name] = address.Spec.Address
				}
				return bound
			}).Should(Equal(held))

			By("new claims get none of the restored addresses")
			for _, pool := range []struct{ kind, name string }{{v1alpha1.MetalVRFIPPoolKind, "nodes"}, {v1alpha1.GlobalMetalVRFIPPoolKind, global}} {
				for i := range 2 {
					address := boundAddress(createClaim(ns, fmt.Sprintf("new-%s-%d", strings.ToLower(pool.kind), i), pool.kind, pool.name))
					Expect(held).NotTo(ContainElement(address.Spec.Address), "an address restored is handed out again")
				}
			}
			list := &ipamv1.IPAddressList{}
			Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
			seen := map[string]string{}
			for _, a := range list.Items {
				key := a.Spec.PoolRef.Kind + "/" + a.Spec.PoolRef.Name + "/" + a.Spec.Address
				Expect(seen).NotTo(HaveKey(key), "%s held by %s and %s", key, seen[key], a.Name)
				seen[key] = a.Name
			}
		},
		Entry("owner references stripped", false),
		Entry("owner references preserved, naming the old UIDs: refused, then restored without", true),
	)
})
