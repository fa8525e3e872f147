package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProxyCommand: `kvp2p proxy` serves on the address it prints, relays a
// completion to its engine and stops cleanly when its context ends.
func TestProxyCommand(t *testing.T) {
	gotParams := make(chan string, 1)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]json.RawMessage
		json.NewDecoder(r.Body).Decode(&body)
		gotParams <- string(body["kv_transfer_params"])
		io.WriteString(w, `{"choices":[{"text":"hi"}]}`)
	}))
	defer engine.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"proxy", "--listen", "127.0.0.1:0", "--engine", engine.URL + ",kv=127.0.0.1:7600", "--pick", "round-robin"}, pw, &stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no address printed: %v; %s", err, stderr.String())
	}
	go io.Copy(io.Discard, pr)
	url := strings.TrimSpace(strings.TrimPrefix(line, "kvp2p proxy: serving "))
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"hi"`) {
		t.Errorf("%d %s: want the engine's answer", resp.StatusCode, b)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Errorf("exit %d: %s", c, stderr.String())
	}
	if p := <-gotParams; p != "" {
		t.Errorf("a first prompt carried kv_transfer_params %s", p)
	}
}

func TestProxyCommandConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--mode", "x", "--engine", "http://h"}, `--mode "x"`},
		{[]string{"--pick", "random", "--engine", "http://h"}, `--pick "random"`},
		{[]string{}, "at least one engine"},
		{[]string{"--engine", "http://h"}, "needs its kvp2p peer"},
		{[]string{"--engine", "http://h,port=1"}, "want URL[,kv=HOST:PORT]"},
		{[]string{"--mode", "pd", "--prefiller", "http://p", "--decoder", "http://d"}, "prefiller http://p: needs its kvp2p peer"},
		{[]string{"--engine", "http://h", "--source", "none", "--max-body", "0"}, "must be positive"},
	} {
		var out, errb bytes.Buffer
		if c := run(context.Background(), append([]string{"proxy", "--listen", "127.0.0.1:0"}, tc.args...), &out, &errb); c != 2 || !strings.Contains(errb.String(), tc.says) {
			t.Errorf("kvp2p proxy %v: exit %d, %q; want exit 2 saying %q", tc.args, c, errb.String(), tc.says)
		}
	}
}
