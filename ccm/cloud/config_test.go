package cloud_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/metal-vrf/cluster-api-metal-vrf/ccm/cloud"
)

func TestReadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string // none when empty
		env  map[string]string
		want cloud.Config
		err  error
	}{{
		name: "the flavors' cloud-sa.json and the project from the Deployment's environment",
		file: `{"apiKey": "token"}`,
		env:  map[string]string{"METAL_PROJECT_ID": "p1"},
		want: cloud.Config{APIKey: "token", ProjectID: "p1"},
	}, {
		name: "every key, trimmed; CPEM's other keys ignored",
		file: `{"apiKey": " token\n", "projectID": "p1", "baseURL": "http://sim:8099", "eipTag": "x", "metro": "da"}`,
		want: cloud.Config{APIKey: "token", ProjectID: "p1", BaseURL: "http://sim:8099"},
	}, {
		name: "the environment wins",
		file: `{"apiKey": "file", "projectID": "p1", "baseURL": "http://file"}`,
		env:  map[string]string{"METAL_API_KEY": "env", "METAL_PROJECT_ID": "p2", "METAL_API_URL": "http://env"},
		want: cloud.Config{APIKey: "env", ProjectID: "p2", BaseURL: "http://env"},
	}, {
		name: "no file: the environment only, the retired provider's variable too",
		env:  map[string]string{"PACKET_API_KEY": "legacy"},
		want: cloud.Config{APIKey: "legacy"},
	}, {
		name: "no token",
		file: `{"projectID": "p1"}`,
		err:  cloud.ErrNoAPIKey,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var file *strings.Reader
			if tc.file != "" {
				file = strings.NewReader(tc.file)
			}
			got, err := readConfig(file, func(k string) string { return tc.env[k] })
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Errorf("ReadConfig = %+v, %v; want %+v, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestReadConfigRefusesAFileThatIsNotJSON(t *testing.T) {
	_, err := cloud.ReadConfig(strings.NewReader("apiKey: token"), func(string) string { return "" })
	if err == nil {
		t.Error("a YAML cloud config was read, want an error")
	}
}

// readConfig passes no reader at all for a nil *strings.Reader, as the
// binary does without --cloud-config.
func readConfig(file *strings.Reader, getenv func(string) string) (cloud.Config, error) {
	if file == nil {
		return cloud.ReadConfig(nil, getenv)
	}
	return cloud.ReadConfig(file, getenv)
}
