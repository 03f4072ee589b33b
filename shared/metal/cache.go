package metal

import (
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ClientCache keeps one Client per credentials Secret, so that the providers'
// controllers share connections and do not rebuild clients on every
// reconcile. A client is rebuilt when its Secret's resourceVersion changes
// (credentials rotated). Every client gets the tuning of the base Config:
// Version, Timeout, PageSize, Retry and Registerer; the credentials come from
// the Secret or the environment. It is safe for concurrent use.
type ClientCache struct {
	base Config

	mu      sync.Mutex
	secrets map[types.NamespacedName]cachedClient
	env     *cachedEnvClient
}

// cachedClient is a client and the Secret version it was built from.
type cachedClient struct {
	resourceVersion string
	client          *Client
}

// cachedEnvClient is the environment's client and what it was built from.
type cachedEnvClient struct {
	apiKey, projectID, baseURL string
	client                     *Client
}

// NewClientCache returns an empty cache whose clients are tuned by base (its
// credentials are ignored). base.BaseURL, when set, is the API of Secrets
// that name none, so a manager pointed at another endpoint (METAL_API_URL)
// never sends a Secret's token anywhere else.
func NewClientCache(base Config) *ClientCache {
	return &ClientCache{base: base, secrets: map[types.NamespacedName]cachedClient{}}
}

// String describes the cache without any credentials.
func (c *ClientCache) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("metal.ClientCache{Secrets: %d, Env: %t}", len(c.secrets), c.env != nil)
}

// GoString makes %#v as safe as %v.
func (c *ClientCache) GoString() string { return c.String() }

// ForSecret returns the client of the credentials in secret (keys apiKey,
// projectID, baseURL; see ConfigFromSecret), building it when the Secret is
// new or has changed since. A Secret without a resourceVersion (built in
// memory, not read from the API server) cannot be told apart from a changed
// one, so its client is built anew on every call.
func (c *ClientCache) ForSecret(secret *corev1.Secret) (*Client, error) {
	if secret == nil {
		return nil, errors.New("metal: no credentials secret")
	}
	key := types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name}
	rv := secret.ResourceVersion
	c.mu.Lock()
	defer c.mu.Unlock()
	if cached, ok := c.secrets[key]; ok && rv != "" && cached.resourceVersion == rv {
		return cached.client, nil
	}
	cfg, err := ConfigFromSecret(secret)
	if err != nil {
		delete(c.secrets, key)
		return nil, err
	}
	client, err := NewClient(c.tuned(cfg))
	if err != nil {
		delete(c.secrets, key)
		return nil, fmt.Errorf("metal: secret %s: %w", key, err)
	}
	if rv != "" {
		c.secrets[key] = cachedClient{resourceVersion: rv, client: client}
	}
	return client, nil
}

// Forget drops the client of a Secret, e.g. one that was deleted, so that
// its credentials are not kept in memory.
func (c *ClientCache) Forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.secrets, key)
}

// FromEnv returns the manager-wide client of the credentials in the
// environment read through getenv (os.Getenv in production; see
// ConfigFromEnv), built once and rebuilt only if they change.
func (c *ClientCache) FromEnv(getenv func(string) string) (*Client, error) {
	cfg, err := ConfigFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.env; e != nil && e.apiKey == cfg.APIKey && e.projectID == cfg.ProjectID && e.baseURL == cfg.BaseURL {
		return e.client, nil
	}
	client, err := NewClient(c.tuned(cfg))
	if err != nil {
		return nil, fmt.Errorf("metal: the environment's credentials: %w", err)
	}
	c.env = &cachedEnvClient{apiKey: cfg.APIKey, projectID: cfg.ProjectID, baseURL: cfg.BaseURL, client: client}
	return client, nil
}

// tuned is cfg's credentials with the cache's tuning.
func (c *ClientCache) tuned(cfg Config) Config {
	cfg.Version, cfg.Timeout, cfg.PageSize, cfg.Retry, cfg.Registerer =
		c.base.Version, c.base.Timeout, c.base.PageSize, c.base.Retry, c.base.Registerer
	if cfg.BaseURL == "" {
		cfg.BaseURL = c.base.BaseURL
	}
	return cfg
}
