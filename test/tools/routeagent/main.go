// Command routeagent is the pod network of the nodes test/node boots as
// machines: run on every node as a hostNetwork DaemonSet, it writes the
// node's CNI configuration (the reference bridge and host-local plugins
// over the podCIDR kube-controller-manager gave the Node) and routes every
// other Node's podCIDR via that Node's InternalIP, so Pods on different
// nodes talk over the nodes' own network (here the VLAN the simulator
// attached) with their own addresses: no overlay, no NAT.
//
// It also serves the test's Pods: `routeagent serve ADDR` answers every
// HTTP request with the host name, `routeagent get URL` prints the body of
// a GET and fails unless it is 200, and `routeagent resolve NAME...`
// prints each name's addresses as the Pod's resolver finds them (Go's,
// reading the /etc/resolv.conf the kubelet wrote: the cluster DNS).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// protocol marks the routes this agent owns (a routing protocol number no
// other program on a node uses), so that it removes the routes of Nodes
// that are gone and nothing else.
const protocol = 201

const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	log.SetFlags(log.LstdFlags | log.Lmsgprefix)
	if len(os.Args) == 3 && os.Args[1] == "serve" {
		host, _ := os.Hostname()
		log.Fatal(http.ListenAndServe(os.Args[2], http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, host)
		})))
	}
	if len(os.Args) == 3 && os.Args[1] == "get" {
		if err := get(os.Args[2]); err != nil {
			log.Fatal(err)
		}
		return
	}
	if len(os.Args) >= 3 && os.Args[1] == "resolve" {
		if err := resolve(os.Args[2:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	if len(os.Args) != 2 {
		log.Fatal("usage: routeagent CNI-CONFIG-DIR | serve ADDR | get URL | resolve NAME...")
	}
	node := os.Getenv("NODE_NAME")
	if node == "" {
		log.Fatal("NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)")
	}
	api, err := inCluster()
	if err != nil {
		log.Fatal(err)
	}
	for {
		if err := sync(api, node, os.Args[1]); err != nil {
			log.Print(err)
		}
		time.Sleep(2 * time.Second)
	}
}

func get(url string) error {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	fmt.Print(string(body))
	return nil
}

// resolve prints a line "NAME ADDRESS..." for each name, its addresses
// sorted, and fails on the first name that does not resolve.
func resolve(names []string) error {
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		addrs, err := net.DefaultResolver.LookupHost(ctx, name)
		cancel()
		if err != nil {
			return err
		}
		sort.Strings(addrs)
		fmt.Println(name, strings.Join(addrs, " "))
	}
	return nil
}

// client reads Nodes with the Pod's service account.
type client struct {
	http  *http.Client
	base  string
	token string
}

func inCluster() (*client, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a Pod: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set")
	}
	token, err := os.ReadFile(filepath.Join(serviceAccount, "token"))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(filepath.Join(serviceAccount, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s/ca.crt holds no certificate", serviceAccount)
	}
	return &client{
		http:  &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
		base:  "https://" + net.JoinHostPort(host, port),
		token: string(token),
	}, nil
}

// nodeList is the part of a NodeList the agent reads.
type nodeList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			PodCIDR string `json:"podCIDR"`
		} `json:"spec"`
		Status struct {
			Addresses []struct {
				Type    string `json:"type"`
				Address string `json:"address"`
			} `json:"addresses"`
		} `json:"status"`
	} `json:"items"`
}

func (c *client) nodes() (*nodeList, error) {
	req, err := http.NewRequest(http.MethodGet, c.base+"/api/v1/nodes", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("list nodes: %s: %s", resp.Status, body)
	}
	list := &nodeList{}
	return list, json.NewDecoder(resp.Body).Decode(list)
}

// sync writes this node's CNI configuration once it has a podCIDR and
// makes the routes to the other Nodes' podCIDRs those of the Nodes.
func sync(api *client, self, cniDir string) error {
	list, err := api.nodes()
	if err != nil {
		return err
	}
	want := map[string]*netlink.Route{}
	for _, n := range list.Items {
		if n.Spec.PodCIDR == "" {
			continue
		}
		if n.Metadata.Name == self {
			if err := writeConfig(cniDir, n.Spec.PodCIDR); err != nil {
				return err
			}
			continue
		}
		_, dst, err := net.ParseCIDR(n.Spec.PodCIDR)
		if err != nil {
			return fmt.Errorf("node %s: podCIDR %q: %w", n.Metadata.Name, n.Spec.PodCIDR, err)
		}
		for _, a := range n.Status.Addresses {
			if gw := net.ParseIP(a.Address); a.Type == "InternalIP" && gw != nil && gw.To4() != nil {
				want[dst.String()] = &netlink.Route{Dst: dst, Gw: gw, Protocol: protocol}
				break
			}
		}
	}
	for dst, r := range want {
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s via %s: %w", dst, r.Gw, err)
		}
	}
	ours, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: protocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return err
	}
	for i := range ours {
		if ours[i].Dst != nil && want[ours[i].Dst.String()] == nil {
			if err := netlink.RouteDel(&ours[i]); err != nil {
				return fmt.Errorf("remove route %s: %w", ours[i].Dst, err)
			}
		}
	}
	return nil
}

// writeConfig writes the conflist the kubelet's runtime reads: a bridge
// whose address is the podCIDR's gateway, host-local addresses from the
// podCIDR, and port mappings. Pods' traffic leaves unmasqueraded: peers
// see the Pod's own address.
func writeConfig(dir, podCIDR string) error {
	conf, err := json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "pods",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": podCIDR}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "10-routeagent.conflist")
	if old, err := os.ReadFile(path); err == nil && string(old) == string(conf) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, conf, 0o644); err != nil {
		return err
	}
	log.Printf("pod network %s: %s", podCIDR, path)
	return os.Rename(tmp, path)
}
