package metal

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// Endpoints is the operator's allow-list of Metal API endpoints a
// credentials Secret may name in baseURL. A Secret is written by whoever may
// write Secrets in its namespace; without the list, a tenant could make the
// managers send requests (with the tenant's token, to any address the
// managers reach) and trust the answers of an API of its own.
type Endpoints struct {
	// allowed are the normalised server URLs (see Endpoint).
	allowed []string
}

// NewEndpoints returns the allow-list of the given base URLs; empty ones are
// skipped, so an unset METAL_API_URL can be passed as is. It fails on a URL
// that is not an absolute http(s) URL.
func NewEndpoints(baseURLs ...string) (*Endpoints, error) {
	e := &Endpoints{}
	for _, base := range baseURLs {
		if strings.TrimSpace(base) == "" {
			continue
		}
		endpoint, err := Endpoint(base)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(e.allowed, endpoint) {
			e.allowed = append(e.allowed, endpoint)
		}
	}
	return e, nil
}

// DefaultEndpoints is the allow-list when the operator sets none: the public
// Metal API and the manager's own METAL_API_URL (read through getenv).
func DefaultEndpoints(getenv func(string) string) (*Endpoints, error) {
	return NewEndpoints(DefaultBaseURL, getenv(EnvBaseURL))
}

// Allows reports whether base (a Secret's baseURL) is on the list: an
// endpoint of the list, or below one's path on the same scheme, host and
// port (one server, which the operator trusts as a whole).
func (e *Endpoints) Allows(base string) bool {
	endpoint, err := Endpoint(base)
	if err != nil {
		return false
	}
	root := strings.TrimSuffix(endpoint, apiPath)
	return slices.ContainsFunc(e.allowed, func(allowed string) bool {
		allowedRoot := strings.TrimSuffix(allowed, apiPath)
		return root == allowedRoot || strings.HasPrefix(root, strings.TrimSuffix(allowedRoot, "/")+"/")
	})
}

// String lists the allowed endpoints.
func (e *Endpoints) String() string { return strings.Join(e.allowed, ", ") }

// Endpoint is the normal form of a base URL: the API's server URL (its path
// decoded and cleaned, the API path added), scheme and host in lower case,
// the host without a trailing dot, an IP address in its canonical form, and
// no default port, so that the spellings of one endpoint compare equal. The
// allow-list and the allocation domains of VRF pools (a VRF is named by
// project, ID and endpoint) depend on it: two spellings of one API must not
// make two domains of one VRF. An empty base is the public API.
func Endpoint(base string) (string, error) {
	server, err := serverURL(strings.TrimSpace(base))
	if err != nil {
		return "", err
	}
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	u.Scheme = strings.ToLower(u.Scheme)
	host, port := strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), u.Port()
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.String()
	}
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	switch {
	case port != "":
		u.Host = net.JoinHostPort(host, port)
	case strings.Contains(host, ":"):
		u.Host = "[" + host + "]"
	default:
		u.Host = host
	}
	return u.String(), nil
}

// EndpointNotAllowedError: a credentials Secret names a baseURL the
// operator does not allow. No request was sent.
type EndpointNotAllowedError struct {
	// Secret is the credentials Secret.
	Secret types.NamespacedName
	// Value is its baseURL.
	Value   string
	allowed string
}

func (e *EndpointNotAllowedError) Error() string {
	return fmt.Sprintf("Secret %s key %s: %s is not a Metal API endpoint the operator allows (the managers' --metal-endpoints: %s); no request was sent",
		e.Secret, SecretKeyBaseURL, message.Quote(e.Value), e.allowed)
}
