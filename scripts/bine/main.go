// bine-check drives a Tor control port with Bine (github.com/cretz/bine)
// and dials through the SOCKS port, printing a JSON report. Run by
// crates/cli/tests/control_interop.rs against the onionmix client.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"time"

	"github.com/cretz/bine/control"
	"golang.org/x/net/proxy"
)

type report struct {
	Authenticated   bool     `json:"authenticated"`
	Version         string   `json:"version"`
	Bootstrap       string   `json:"bootstrap"`
	CircuitLines    []string `json:"circuit_lines"`
	BuiltCircuits   int      `json:"built_circuits"`
	DownloadOK      bool     `json:"download_ok"`
	NewnymOK        bool     `json:"newnym_ok"`
	StreamEventSeen bool     `json:"stream_event_seen"`
	Error           string   `json:"error,omitempty"`
}

// circuitLines reads GETINFO circuit-status as Bine returns it: a single
// circuit comes on one line ("250-circuit-status=1 BUILT ..."), several as
// a data reply whose value starts with CRLF; both are split into lines.
func circuitLines(v string) []string {
	var out []string
	for _, l := range strings.Split(strings.ReplaceAll(v, "\r\n", "\n"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func run(r *report, ctl, socks, url string) error {
	tc, err := textproto.Dial("tcp", ctl)
	if err != nil {
		return err
	}
	c := control.NewConn(tc)
	defer c.Close()
	if err := c.Authenticate(""); err != nil {
		return fmt.Errorf("authenticate: %w", err)
	}
	r.Authenticated = true
	vals, err := c.GetInfo("version", "status/bootstrap-phase", "circuit-status")
	if err != nil {
		return fmt.Errorf("getinfo: %w", err)
	}
	for _, kv := range vals {
		switch kv.Key {
		case "version":
			r.Version = kv.Val
		case "status/bootstrap-phase":
			r.Bootstrap = kv.Val
		case "circuit-status":
			r.CircuitLines = circuitLines(kv.Val)
		}
	}
	for _, l := range r.CircuitLines {
		if f := strings.Fields(l); len(f) >= 2 && f[1] == "BUILT" {
			r.BuiltCircuits++
		}
	}
	events := make(chan control.Event, 256)
	if err := c.AddEventListener(events, control.EventCodeStream); err != nil {
		return fmt.Errorf("setevents: %w", err)
	}

	dialer, err := proxy.SOCKS5("tcp", socks, nil, &net.Dialer{Timeout: 60 * time.Second})
	if err != nil {
		return err
	}
	client := &http.Client{
		Transport: &http.Transport{Dial: dialer.Dial},
		Timeout:   120 * time.Second,
	}
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	r.DownloadOK = strings.EqualFold(hex.EncodeToString(sum[:]), resp.Header.Get("X-Onionmix-Sha256"))
	// The STREAM events of the download are already on the wire: read them
	// one by one (Bine relays each to the channel).
	for i := 0; i < 64 && !r.StreamEventSeen; i++ {
		if err := c.HandleNextEvent(); err != nil {
			return fmt.Errorf("events: %w", err)
		}
		for len(events) > 0 {
			if se, ok := (<-events).(*control.StreamEvent); ok && se.Status == "SUCCEEDED" {
				r.StreamEventSeen = true
			}
		}
	}
	r.NewnymOK = c.Signal("NEWNYM") == nil
	return nil
}

func main() {
	ctl := flag.String("control", "", "control port host:port")
	socks := flag.String("socks", "", "SOCKS host:port")
	url := flag.String("url", "", "URL to fetch through SOCKS")
	flag.Parse()
	var r report
	if err := run(&r, *ctl, *socks, *url); err != nil {
		r.Error = err.Error()
	}
	out, _ := json.Marshal(&r)
	fmt.Println(string(out))
	if r.Error != "" {
		os.Exit(1)
	}
}
