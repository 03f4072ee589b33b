package emulator

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cloudv1 "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/cloud/api/v1alpha1"
	inmemoryruntime "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
	inmemoryserver "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// workloadCluster is one emulated workload cluster: its objects in a
// resource group of the in-memory runtime, and its API server and etcd
// members behind a mux of its own, whose serving certificate names the
// endpoint's address (the upstream mux names one host per mux and tells
// clusters apart by port, so two clusters cannot share one).
type workloadCluster struct {
	key      types.NamespacedName // the Cluster in the management cluster
	endpoint netip.AddrPort
	version  string
	objects  inmemoryruntime.Client
	mux      *inmemoryserver.WorkloadClustersMux
	ca, etcd ca
	// exposed: the endpoint's address is bound to lo.
	exposed bool
	// apiServers are the control-plane nodes whose API server the mux
	// serves; they are added once the endpoint is exposed, as the mux
	// checks that it answers.
	apiServers map[string]bool
}

// ca is a certificate authority of the cluster, from its Secret in the
// management cluster.
type ca struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
}

// hash is the CA's pin as kubeadm join's caCertHashes write it.
func (c ca) hash() string {
	sum := sha256.Sum256(c.cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// listener names the cluster's resource group and mux listener.
func (w *workloadCluster) listener() string { return w.key.String() }

func newWorkloadCluster(ctx context.Context, mgmt client.Reader, manager inmemoryruntime.Manager, key types.NamespacedName, endpoint netip.AddrPort, version string) (*workloadCluster, error) {
	w := &workloadCluster{key: key, endpoint: endpoint, version: version, apiServers: map[string]bool{}}
	var err error
	if w.ca, err = readCA(ctx, mgmt, key, secret.ClusterCA); err != nil {
		return nil, err
	}
	if w.etcd, err = readCA(ctx, mgmt, key, secret.EtcdCA); err != nil {
		return nil, err
	}
	port := int32(endpoint.Port())
	// Debug port 0: the mux's debug server listens where the system puts it.
	w.mux, err = inmemoryserver.NewWorkloadClustersMux(manager, endpoint.Addr().String(),
		inmemoryserver.CustomPorts{MinPort: port, MaxPort: port + 1})
	if err != nil {
		return nil, err
	}
	manager.AddResourceGroup(w.listener())
	w.objects = manager.GetResourceGroup(w.listener()).GetClient()
	if _, err := w.mux.InitWorkloadClusterListener(w.listener(), port); err != nil {
		return nil, errors.Join(err, w.mux.Shutdown(ctx))
	}
	if err := w.mux.RegisterResourceGroup(w.listener(), w.listener()); err != nil {
		return nil, errors.Join(err, w.mux.Shutdown(ctx))
	}
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespacePublic, metav1.NamespaceSystem} {
		if err := w.create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}}}); err != nil {
			return nil, errors.Join(err, w.mux.Shutdown(ctx))
		}
	}
	return w, nil
}

func readCA(ctx context.Context, mgmt client.Reader, cluster types.NamespacedName, purpose secret.Purpose) (ca, error) {
	s, err := secret.Get(ctx, mgmt, cluster, purpose)
	if err != nil {
		return ca{}, fmt.Errorf("reading the %s of cluster %s: %w", purpose, cluster, err)
	}
	cert, err := certs.DecodeCertPEM(s.Data[secret.TLSCrtDataName])
	if err != nil {
		return ca{}, fmt.Errorf("the %s of cluster %s: %w", purpose, cluster, err)
	}
	if cert == nil {
		return ca{}, fmt.Errorf("the %s of cluster %s has no certificate", purpose, cluster)
	}
	key, err := certs.DecodePrivateKeyPEM(s.Data[secret.TLSKeyDataName])
	if err != nil {
		return ca{}, fmt.Errorf("the %s of cluster %s has no key: %w", purpose, cluster, err)
	}
	rsaKey, ok := key.(*rsa.PrivateKey)
	if !ok {
		return ca{}, fmt.Errorf("the %s of cluster %s is not an RSA key, which the in-memory mux needs", purpose, cluster)
	}
	return ca{cert: cert, key: rsaKey}, nil
}

// create creates obj unless it exists.
func (w *workloadCluster) create(ctx context.Context, obj client.Object) error {
	if err := w.objects.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T %s in workload cluster %s: %w", obj, obj.GetName(), w.key, err)
	}
	return nil
}

// uninitializedTaint is the taint a kubelet with cloud-provider external
// puts on its node until a cloud controller initialises it.
var uninitializedTaint = corev1.Taint{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule}

// providedNodeIPAnnotation is where the kubelet leaves --node-ip for the
// cloud controller when it runs with cloud-provider external.
const providedNodeIPAnnotation = "alpha.kubernetes.io/provided-node-ip"

// addNode registers n as the kubelet and kubeadm would: the Node, Ready,
// and on a control plane the static pods, the etcd member and kubeadm's
// objects.
func (w *workloadCluster) addNode(ctx context.Context, n Node) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelHostname: n.Name}, Annotations: map[string]string{}},
		Spec:       corev1.NodeSpec{ProviderID: n.ProviderID},
		Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: w.version},
			Conditions: readyConditions(),
		},
	}
	if n.Role.IsControlPlane() {
		node.Labels["node-role.kubernetes.io/control-plane"] = ""
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
	}
	addresses := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: n.Name}}
	if n.NodeIP.IsValid() {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: n.NodeIP.String()})
		node.Annotations[providedNodeIPAnnotation] = n.NodeIP.String()
	}
	if n.ExternalCloudProvider {
		node.Spec.Taints = append(node.Spec.Taints, uninitializedTaint)
	} else {
		node.Status.Addresses = addresses
	}
	if err := w.create(ctx, node); err != nil {
		return err
	}
	if !n.Role.IsControlPlane() {
		return nil
	}
	for _, component := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if err := w.create(ctx, staticPod(component, n.Name, nil)); err != nil {
			return err
		}
	}
	if err := w.addEtcdMember(ctx, n.Name); err != nil {
		return err
	}
	return w.addKubeadmObjects(ctx)
}

func readyConditions() []corev1.NodeCondition {
	now := metav1.Now()
	return []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastTransitionTime: now},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastTransitionTime: now},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastTransitionTime: now},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastTransitionTime: now},
	}
}

// staticPod is a control-plane static pod as kubeadm names and labels it,
// running and ready on node.
func staticPod(component, node string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem, Name: component + "-" + node, Annotations: annotations,
			Labels: map[string]string{"component": component, "tier": "control-plane"},
		},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

// addEtcdMember adds the etcd pod of node, annotated with the cluster's
// and its own member ID as the in-memory etcd reads them (the first member
// leads), and the member's serving certificate to the mux.
func (w *workloadCluster) addEtcdMember(ctx context.Context, node string) error {
	name := "etcd-" + node
	pods, err := list[corev1.Pod](ctx, w.objects, corev1.SchemeGroupVersion.WithKind("PodList"), client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{"component": "etcd"})
	if err != nil {
		return err
	}
	annotations := map[string]string{
		cloudv1.EtcdClusterIDAnnotationName: strconv.FormatUint(uint64(rand.Uint32()|1), 10),
		cloudv1.EtcdMemberIDAnnotationName:  strconv.FormatUint(uint64(rand.Uint32()|1), 10),
	}
	if i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name != name }); i >= 0 {
		annotations[cloudv1.EtcdClusterIDAnnotationName] = pods[i].Annotations[cloudv1.EtcdClusterIDAnnotationName]
	} else {
		annotations[cloudv1.EtcdLeaderFromAnnotationName] = time.Now().Format(time.RFC3339)
	}
	if err := w.create(ctx, staticPod("etcd", node, annotations)); err != nil {
		return err
	}
	if w.mux.HasEtcdMember(w.listener(), name) {
		return nil
	}
	return w.mux.AddEtcdMember(w.listener(), name, w.etcd.cert, w.etcd.key)
}

// addKubeadmObjects creates what kubeadm init leaves in the cluster and
// Cluster API's kubeadm control plane reads or updates: the kubeadm-config
// ConfigMap, the RBAC joining nodes need, kube-proxy and CoreDNS.
func (w *workloadCluster) addKubeadmObjects(ctx context.Context) error {
	objs := []client.Object{
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
			Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubeadm:get-nodes"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "system:bootstrappers:kubeadm:default-node-token"}},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"},
			Data:       map[string]string{"ClusterConfiguration": ""},
		},
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-proxy", Labels: map[string]string{"component": "kube-proxy"}},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:" + w.version}},
			}}},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"},
			Data:       map[string]string{"Corefile": ".:53 {\n    forward . /etc/resolv.conf\n}\n"},
		},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.12.1"}},
			}}},
		},
	}
	for _, obj := range objs {
		if err := w.create(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// serveAPI adds the API server of the control-plane node to the mux. The
// mux checks that the endpoint answers, so the endpoint must be exposed.
func (w *workloadCluster) serveAPI(node string) error {
	if w.apiServers[node] {
		return nil
	}
	if err := w.mux.AddAPIServer(w.listener(), "kube-apiserver-"+node, w.ca.cert, w.ca.key); err != nil {
		return err
	}
	w.apiServers[node] = true
	return nil
}

// removeNode deletes what addNode created for the node.
func (w *workloadCluster) removeNode(ctx context.Context, n Node) error {
	objs := []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}}
	if n.Role.IsControlPlane() {
		for _, component := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"} {
			objs = append(objs, staticPod(component, n.Name, nil))
		}
	}
	var errs []error
	for _, obj := range objs {
		if err := w.objects.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if n.Role.IsControlPlane() {
		errs = append(errs, w.mux.DeleteEtcdMember(w.listener(), "etcd-"+n.Name))
		if w.apiServers[n.Name] {
			errs = append(errs, w.mux.DeleteAPIServer(w.listener(), "kube-apiserver-"+n.Name))
			delete(w.apiServers, n.Name)
		}
	}
	return errors.Join(errs...)
}

// initialiseNodes does what the Equinix Metal cloud controller (CPEM) does
// for nodes its kubelet left uninitialised, once a ClusterResourceSet
// applied its Deployment to the cluster: it gives them their addresses
// and lifts the taint. Without the Deployment, nodes stay uninitialised.
func (w *workloadCluster) initialiseNodes(ctx context.Context) error {
	if !w.runsCloudController(ctx) {
		return nil
	}
	nodes, err := list[corev1.Node](ctx, w.objects, corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err != nil {
		return err
	}
	for i := range nodes {
		node := &nodes[i]
		at := slices.IndexFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == uninitializedTaint.Key })
		if at < 0 {
			continue
		}
		node.Spec.Taints = slices.Delete(node.Spec.Taints, at, at+1)
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: node.Name}}
		if ip := node.Annotations[providedNodeIPAnnotation]; ip != "" {
			node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(node)
		if err != nil {
			return err
		}
		updated := &unstructured.Unstructured{Object: content}
		updated.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
		if err := w.objects.Update(ctx, updated); err != nil {
			return err
		}
	}
	return nil
}

// cloudControllerArg is the argument that makes a Deployment of kube-system
// the Equinix Metal cloud controller.
const cloudControllerArg = "--cloud-provider=equinixmetal"

func (w *workloadCluster) runsCloudController(ctx context.Context) bool {
	deployments, err := list[appsv1.Deployment](ctx, w.objects, appsv1.SchemeGroupVersion.WithKind("DeploymentList"), client.InNamespace(metav1.NamespaceSystem))
	if err != nil {
		return false
	}
	for _, d := range deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if slices.Contains(c.Args, cloudControllerArg) {
				return true
			}
		}
	}
	return false
}

// shutdown stops the cluster's mux and forgets its objects.
func (w *workloadCluster) shutdown(ctx context.Context, manager inmemoryruntime.Manager) error {
	manager.DeleteResourceGroup(w.listener())
	return errors.Join(w.mux.DeleteWorkloadClusterListener(w.listener()), w.mux.Shutdown(ctx))
}

// list lists objects of type T (listKind is its list's kind) from the
// in-memory store, which keeps what clients wrote through the emulated API
// server as unstructured objects and cannot hand them out as typed ones.
func list[T any](ctx context.Context, objects inmemoryruntime.Client, listKind schema.GroupVersionKind, opts ...client.ListOption) ([]T, error) {
	u := &unstructured.UnstructuredList{}
	u.SetGroupVersionKind(listKind)
	if err := objects.List(ctx, u, opts...); err != nil {
		return nil, err
	}
	out := make([]T, len(u.Items))
	for i := range u.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Items[i].Object, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
