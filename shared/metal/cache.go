package metal

import (
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ClientCache keeps one Client per credentials Secret, so that the providers'
// controllers share connections and do not rebuild clients on every
// reconcile. A client is rebuilt when its Secret's resourceVersion changes
// (credentials rotated), and dropped when its Secret is gone (Forget), when
// unused for MaxIdle, or when the cache is full and it is the least recently
// used: a deleted Secret's token does not stay in memory, and Secrets made by
// the thousand do not grow it without bound. Every client gets the tuning of
// the base Config: Version, Timeout, PageSize, Retry and Registerer; the
// credentials come from the Secret or the environment. A Secret's baseURL
// must be one of the allowed Endpoints. It is safe for concurrent use.
type ClientCache struct {
	base      Config
	endpoints *Endpoints
	max       int
	maxIdle   time.Duration

	mu      sync.Mutex
	secrets map[types.NamespacedName]cachedClient
	env     *cachedEnvClient
}

// CacheOptions bound a ClientCache and say which endpoints its Secrets may
// name.
type CacheOptions struct {
	// Endpoints a Secret's baseURL may name; nil allows the public API and
	// the base Config's BaseURL.
	Endpoints *Endpoints
	// MaxSecrets is how many Secrets' clients are kept; DefaultMaxSecrets
	// when zero.
	MaxSecrets int
	// MaxIdle is how long an unused client is kept; DefaultMaxIdle when zero.
	MaxIdle time.Duration
}

// Defaults of CacheOptions.
const (
	DefaultMaxSecrets = 1024
	DefaultMaxIdle    = time.Hour
)

// cachedClient is a client, the Secret version it was built from and when
// it was last handed out.
type cachedClient struct {
	resourceVersion string
	client          *Client
	used            time.Time
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
func NewClientCache(base Config, opts CacheOptions) *ClientCache {
	c := &ClientCache{base: base, endpoints: opts.Endpoints, max: opts.MaxSecrets, maxIdle: opts.MaxIdle,
		secrets: map[types.NamespacedName]cachedClient{}}
	if c.endpoints == nil {
		var err error
		if c.endpoints, err = NewEndpoints(DefaultBaseURL, base.BaseURL); err != nil {
			// A bad base URL fails every client built with it anyway.
			c.endpoints = &Endpoints{}
		}
	}
	if c.max <= 0 {
		c.max = DefaultMaxSecrets
	}
	if c.maxIdle <= 0 {
		c.maxIdle = DefaultMaxIdle
	}
	return c
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
// one, so its client is built anew on every call. A baseURL the endpoints do
// not allow is an *EndpointNotAllowedError, and no client is built.
func (c *ClientCache) ForSecret(secret *corev1.Secret) (*Client, error) {
	if secret == nil {
		return nil, errors.New("metal: no credentials secret")
	}
	key := types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name}
	rv := secret.ResourceVersion
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(now)
	if cached, ok := c.secrets[key]; ok && rv != "" && cached.resourceVersion == rv {
		cached.used = now
		c.secrets[key] = cached
		return cached.client, nil
	}
	// The Secret is new or changed: the client of its old version goes
	// whatever comes of the new one.
	delete(c.secrets, key)
	cfg, err := ConfigFromSecret(secret)
	if err != nil {
		return nil, err
	}
	if cfg.BaseURL != "" && !c.endpoints.Allows(cfg.BaseURL) {
		return nil, &EndpointNotAllowedError{Secret: key, Value: cfg.BaseURL, allowed: c.endpoints.String()}
	}
	client, err := NewClient(c.tuned(cfg))
	if err != nil {
		return nil, fmt.Errorf("metal: secret %s: %w", key, err)
	}
	if rv != "" {
		c.evict()
		c.secrets[key] = cachedClient{resourceVersion: rv, client: client, used: now}
	}
	return client, nil
}

// expire drops the clients unused for maxIdle. Called with mu held.
func (c *ClientCache) expire(now time.Time) {
	for key, cached := range c.secrets {
		if now.Sub(cached.used) > c.maxIdle {
			delete(c.secrets, key)
		}
	}
}

// evict makes room for one client, dropping the least recently used.
// Called with mu held.
func (c *ClientCache) evict() {
	for len(c.secrets) >= c.max {
		var oldest types.NamespacedName
		var at time.Time
		for key, cached := range c.secrets {
			if at.IsZero() || cached.used.Before(at) {
				oldest, at = key, cached.used
			}
		}
		delete(c.secrets, oldest)
	}
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
