package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
