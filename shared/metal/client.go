package metal

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

const (
	// DefaultBaseURL is the root of the public Equinix Metal API.
	DefaultBaseURL = "https://api.equinix.com"
	// DefaultTimeout bounds one API call, retries included.
	DefaultTimeout = 60 * time.Second
	// DefaultPageSize is how many items a paginated list asks for per page.
	// The API defaults to 10; asking for more saves round trips (and rate
	// limit budget) on large projects.
	DefaultPageSize = 100

	// apiPath is where the Metal API lives below the base URL.
	apiPath = "/metal/v1"
	// userAgentProduct names this project in the User-Agent header.
	userAgentProduct = "cluster-api-metal-vrf"
)

// Keys of the credentials Secret read by ConfigFromSecret.
const (
	SecretKeyAPIKey    = "apiKey"
	SecretKeyProjectID = "projectID"
	SecretKeyBaseURL   = "baseURL"
)

// Environment variables read by ConfigFromEnv.
const (
	// EnvAPIKey holds the API token (the name the Equinix Metal cloud
	// provider uses).
	EnvAPIKey = "METAL_API_KEY"
	// EnvLegacyAPIKey is the name the retired Packet provider used; it is
	// read when EnvAPIKey is unset.
	EnvLegacyAPIKey = "PACKET_API_KEY"
	// EnvProjectID holds the project ID.
	EnvProjectID = "METAL_PROJECT_ID"
	// EnvBaseURL overrides the API base URL, e.g. to point at the simulator.
	EnvBaseURL = "METAL_API_URL"
)

// Config configures a Client. Only APIKey is required.
type Config struct {
	// APIKey is the token sent as X-Auth-Token. String and GoString redact it
	// and it is never marshalled, so logging a Config cannot leak it.
	APIKey string `json:"-"`
	// ProjectID scopes the project-level operations (lists, creates). Calls
	// on objects addressed by their own ID do not need it.
	ProjectID string
	// BaseURL is the API root, DefaultBaseURL when empty. A trailing
	// "/metal/v1" is accepted and ignored.
	BaseURL string
	// Version is this project's version, reported in the User-Agent.
	Version string
	// Timeout bounds each API call including its retries; DefaultTimeout
	// when zero. A paginated list applies it to every page.
	Timeout time.Duration
	// PageSize is the per_page of paginated lists; DefaultPageSize when zero.
	PageSize int32
	// Retry tunes the retries of failed calls; zero fields take defaults.
	Retry RetryPolicy
	// Registerer receives the client's metrics; nil disables them. Clients
	// sharing a Registerer share the collectors, so creating one client per
	// credentials Secret is fine.
	Registerer prometheus.Registerer
}

// String describes the configuration without the API key.
func (c Config) String() string {
	key := "<none>"
	if c.APIKey != "" {
		key = "<redacted>"
	}
	return fmt.Sprintf("metal.Config{ProjectID: %q, BaseURL: %q, APIKey: %s}", c.ProjectID, c.BaseURL, key)
}

// GoString makes %#v as safe as %v.
func (c Config) GoString() string { return c.String() }

// ConfigFromSecret reads credentials from a Secret with the keys apiKey
// (required), projectID and baseURL (both optional). Values are trimmed, so a
// Secret created from a file with a trailing newline works. A Secret of
// ResourceSetSecretType holds them in the cloud provider's Secret it carries
// (see configFromResourceSet).
func ConfigFromSecret(secret *corev1.Secret) (Config, error) {
	if secret == nil {
		return Config{}, errors.New("metal: no credentials secret")
	}
	if secret.Type == ResourceSetSecretType {
		if cfg, ok := configFromResourceSet(secret); ok {
			return cfg, nil
		}
		return Config{}, fmt.Errorf("metal: secret %s/%s of type %s carries no Secret manifest whose %s has an apiKey",
			secret.Namespace, secret.Name, ResourceSetSecretType, CloudConfigKey)
	}
	cfg := Config{
		APIKey:    secretValue(secret, SecretKeyAPIKey),
		ProjectID: secretValue(secret, SecretKeyProjectID),
		BaseURL:   secretValue(secret, SecretKeyBaseURL),
	}
	if cfg.APIKey == "" {
		return Config{}, fmt.Errorf("metal: secret %s/%s has no %q key or it is empty", secret.Namespace, secret.Name, SecretKeyAPIKey)
	}
	return cfg, nil
}

// secretValue reads key from Data, falling back to StringData: the API server
// folds StringData into Data, but Secrets built in memory (tests, fake
// clients) may only have StringData.
func secretValue(secret *corev1.Secret, key string) string {
	if v, ok := secret.Data[key]; ok {
		return strings.TrimSpace(string(v))
	}
	return strings.TrimSpace(secret.StringData[key])
}

// ConfigFromEnv reads credentials from the environment through getenv
// (os.Getenv in production): METAL_API_KEY, or PACKET_API_KEY when unset;
// METAL_PROJECT_ID; and METAL_API_URL to override the base URL.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{
		APIKey:    strings.TrimSpace(getenv(EnvAPIKey)),
		ProjectID: strings.TrimSpace(getenv(EnvProjectID)),
		BaseURL:   strings.TrimSpace(getenv(EnvBaseURL)),
	}
	if cfg.APIKey == "" {
		cfg.APIKey = strings.TrimSpace(getenv(EnvLegacyAPIKey))
	}
	if cfg.APIKey == "" {
		return Config{}, fmt.Errorf("metal: neither %s nor %s is set", EnvAPIKey, EnvLegacyAPIKey)
	}
	return cfg, nil
}

// Client calls the Metal API on behalf of one set of credentials. It is safe
// for concurrent use.
type Client struct {
	api       *metalv1.APIClient
	endpoint  string
	projectID string
	timeout   time.Duration
	pageSize  int32
}

// NewClient builds a Client from cfg.
func NewClient(cfg Config) (*Client, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("metal: an API key is required")
	}
	server, err := serverURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	endpoint, err := Endpoint(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("metal: registering metrics: %w", err)
	}

	sdk := metalv1.NewConfiguration()
	sdk.Servers = metalv1.ServerConfigurations{{URL: server}}
	sdk.UserAgent = userAgent(cfg.Version, sdk.UserAgent)
	sdk.AddDefaultHeader("X-Auth-Token", cfg.APIKey)
	// No http.Client timeout: every call carries a context deadline instead,
	// which also bounds the retry transport's waits.
	sdk.HTTPClient = &http.Client{
		Transport:     newTransport(http.DefaultTransport, cfg.Retry.withDefaults(), m),
		CheckRedirect: refuseRedirect,
	}

	c := &Client{
		api:       metalv1.NewAPIClient(sdk),
		endpoint:  endpoint,
		projectID: cfg.ProjectID,
		timeout:   cfg.Timeout,
		pageSize:  cfg.PageSize,
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.pageSize <= 0 {
		c.pageSize = DefaultPageSize
	}
	return c, nil
}

// refuseRedirect keeps the token on the endpoint the operator allowed (see
// Endpoints): the Metal API answers without redirects, and a redirect
// followed would carry the X-Auth-Token header, which Go does not know as
// sensitive, to wherever it points. The redirect comes back as the answer,
// an error.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// InProject returns a client of the same credentials scoped to another
// project. It shares the receiver's connections, retries and metrics, so one
// client per credentials Secret can serve every project the token may reach.
func (c *Client) InProject(projectID string) *Client {
	scoped := *c
	scoped.projectID = projectID
	return &scoped
}

// APIKey is the client's token, for the one caller that must hand it on:
// bootstrap data written for upstream CAPP asks for it ({{ .apiKey }}) to
// configure the cloud provider on control-plane nodes.
func (c *Client) APIKey() string { return c.api.GetConfig().DefaultHeader["X-Auth-Token"] }

// Endpoint is the API the client calls, in the normal form of Endpoint.
func (c *Client) Endpoint() string { return c.endpoint }

// ProjectID is the project the client's project-level operations act in.
func (c *Client) ProjectID() string { return c.projectID }

// serverURL turns a base URL into the SDK's server URL, which includes the
// API path.
func serverURL(base string) (string, error) {
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("metal: base URL %q is not an absolute http(s) URL", base)
	}
	if u.User != nil {
		return "", fmt.Errorf("metal: base URL %q carries user information; the token goes in the Secret's %s", u.Redacted(), SecretKeyAPIKey)
	}
	// The path decoded, its dot segments and doubled slashes resolved:
	// %6Detal/v1, ./metal/v1 and metal//v1 are the same API.
	u.Path = strings.TrimSuffix(strings.TrimSuffix(path.Clean("/"+u.Path), "/"), apiPath) + apiPath
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String(), nil
}

// userAgent names this project and its version ahead of the SDK's own token.
func userAgent(version, sdkAgent string) string {
	if version == "" {
		version = "dev"
	}
	return fmt.Sprintf("%s/%s %s", userAgentProduct, version, sdkAgent)
}

// errNoProject is returned by project-scoped operations on a client built
// without a project ID.
var errNoProject = errors.New("metal: this operation needs a project ID (projectID in the credentials secret or " + EnvProjectID + ")")

func (c *Client) requireProject() error {
	if c.projectID == "" {
		return errNoProject
	}
	return nil
}
