package metalcalls

import (
	"context"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// TestForeignProviderIDIsLeftAlone is the attack of issue 22: a machine
// created with spec.providerID naming another machine's device, then
// deleted, deleted that device.
func TestForeignProviderIDIsLeftAlone(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(3 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	ctx := context.Background()
	ctrl.SetLogger(zap.New(zap.WriteTo(testWriter{t}), zap.UseDevMode(true)))
	metalSim, k8s, ns := start(ctx, t, g)
	api, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: metalSim.URL, ProjectID: simtest.Project})
	g.Expect(err).NotTo(HaveOccurred())

	_, victim := createMachine(ctx, g, k8s, ns, "victim")
	g.Eventually(func() bool { return provisioned(ctx, k8s, victim) }).Should(BeTrue())
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(victim), victim)).To(Succeed())
	stolen := victim.Spec.ProviderID

	_, thief := createMachine(ctx, g, k8s, ns, "thief", func(pm *infrav1.PacketMachine) { pm.Spec.ProviderID = stolen })
	g.Eventually(func() string {
		current := &infrav1.PacketMachine{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(thief), current); err != nil {
			return ""
		}
		if c := meta.FindStatusCondition(current.Status.Conditions, infrav1.DeviceReadyCondition); c != nil {
			return c.Reason + ": " + c.Message
		}
		return ""
	}).Should(And(HavePrefix(infrav1.DeviceNotOwnedReason), ContainSubstring(stolen)))

	g.Expect(k8s.Delete(ctx, thief)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(thief), &infrav1.PacketMachine{}))
	}).Should(BeTrue())
	dev, err := api.GetDevice(ctx, stolen[len("equinixmetal://"):])
	g.Expect(err).NotTo(HaveOccurred(), "the victim's device was deleted with the thief's machine")
	g.Expect(dev.GetState()).To(Equal(metalv1.DEVICESTATE_ACTIVE))
}
