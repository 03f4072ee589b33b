package testenv

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	cappmanager "github.com/metal-vrf/cluster-api-metal-vrf/capp/manager"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/manager"
)

// BindGeneratedRole creates the ClusterRole of file (as generated from a
// provider's RBAC markers) and the ServiceAccount account of namespace,
// bound to it: a manager's identity as installed.
func (e *Environment) BindGeneratedRole(ctx context.Context, namespace, account, file string) error {
	objects, err := ReadObjects(file)
	if err != nil {
		return err
	}
	if len(objects) != 1 || objects[0].GetKind() != "ClusterRole" {
		return fmt.Errorf("%s: want one ClusterRole", file)
	}
	role := objects[0]
	if err := e.Client.Create(ctx, role); err != nil {
		return err
	}
	if err := e.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: account}}); err != nil {
		return err
	}
	return e.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: account},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.GetName()},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: account}},
	})
}

// BindLeaderElectionRole creates the Role of file (as generated, a
// manager's namespaced rights) in namespace, bound to the ServiceAccount
// account there.
func (e *Environment) BindLeaderElectionRole(ctx context.Context, namespace, account, file string) error {
	objects, err := ReadObjects(file)
	if err != nil {
		return err
	}
	if len(objects) != 1 || objects[0].GetKind() != "Role" {
		return fmt.Errorf("%s: want one Role", file)
	}
	role := objects[0]
	role.SetNamespace(namespace)
	role.SetName(account + "-" + role.GetName())
	if err := e.Client.Create(ctx, role); err != nil {
		return err
	}
	return e.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: role.GetName()},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.GetName()},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: account}},
	})
}

// ServiceAccount is the user the API server makes of a ServiceAccount's
// token, for impersonation.
func ServiceAccount(namespace, name string) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + name}
}

// The managers' ServiceAccounts in StartAsInstalled's namespace.
const (
	IPAMAccount = "ipam-manager"
	CAPPAccount = "capp-manager"
)

// StartAsInstalled runs both managers as installed: in namespace (created
// here), each as its ServiceAccount bound to the ClusterRole `make
// generate` writes from its RBAC markers (and the IPAM manager to its
// leader election Role, where its allocation records live). stops holds
// what stops them, in order of start. The environment must have been
// started with CAPPCRDs.
func (e *Environment) StartAsInstalled(ctx context.Context, namespace string, ipamOpts manager.Options, cappOpts cappmanager.Options) (stops []func(), err error) {
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return nil, err
	}
	for account, role := range map[string]string{
		IPAMAccount: filepath.Join("config", "ipam", "rbac", "role.yaml"),
		CAPPAccount: filepath.Join("config", "capp", "rbac", "role.yaml"),
	} {
		if err := e.BindGeneratedRole(ctx, namespace, account, filepath.Join(e.Root, role)); err != nil {
			return nil, err
		}
	}
	if err := e.BindLeaderElectionRole(ctx, namespace, IPAMAccount, filepath.Join(e.Root, "config", "ipam", "rbac", "leader_election_role.yaml")); err != nil {
		return nil, err
	}
	ipamOpts.AllocationNamespace = namespace
	stop, err := e.StartIPAMAs(ctx, ServiceAccount(namespace, IPAMAccount), ipamOpts)
	if err != nil {
		return nil, fmt.Errorf("the IPAM manager with its role: %w", err)
	}
	stops = append(stops, stop)
	stop, err = e.StartCAPPAs(ctx, ServiceAccount(namespace, CAPPAccount), cappOpts)
	if err != nil {
		return stops, fmt.Errorf("the CAPP manager with its role: %w", err)
	}
	return append(stops, stop), nil
}
