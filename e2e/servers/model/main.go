// Command model is a scripted model server: it speaks the Anthropic
// Messages API (POST /v1/messages, streamed and not, and
// /v1/messages/count_tokens), OpenAI's Chat Completions and Responses APIs
// (POST /v1/chat/completions, /v1/responses, streamed and not; GET
// /v1/models) the way the real APIs do, plays a script of
// assistant turns, and records every request it receives. It is the one
// stand-in the end-to-end tests and benchmarks allow on the model wire: no
// model is reachable from the test machine.
//
//	model -listen 127.0.0.1:0 -script script.json -record requests.jsonl
//	      [-tls-cert cert.pem -tls-key key.pem]   (HTTPS instead of HTTP)
//
// It prints "listening on ADDR" as the first line on stdout once it accepts
// connections; logs go to stderr.
//
// The script (see Script) is a list of turns, each with the substrings that
// select it and the content blocks it answers with. A request is matched on
// its content, not its order: the last turn whose every "match" string
// occurs in the request's last message is played, so a repeated or extra
// request (title generation, a quota probe) gets a sensible answer and
// folding the conversation does not lose the thread.
//
// Every request is appended to the record file as one JSON line (see
// Record): method, path, query, headers and the body as received, so that a
// test can assert on exactly what the model saw.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	os.Exit(run())
}

func run() int {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	scriptPath := flag.String("script", "", "script file (JSON); none: every request gets the fallback answer")
	recordPath := flag.String("record", "", "append every request to this JSONL file; none: record nothing")
	chunk := flag.Int("chunk", 16, "bytes of text per text_delta and of JSON per input_json_delta")
	tlsCert := flag.String("tls-cert", "", "serve HTTPS with this certificate (PEM; with -tls-key)")
	tlsKey := flag.String("tls-key", "", "the private key of -tls-cert (PEM)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	sc := &Script{}
	if *scriptPath != "" {
		var err error
		if sc, err = LoadScript(*scriptPath); err != nil {
			log.Error("model: loading the script", "err", err)
			return 1
		}
	}
	var rec *Recorder
	if *recordPath != "" {
		var err error
		if rec, err = OpenRecorder(*recordPath); err != nil {
			log.Error("model: opening the record file", "err", err)
			return 1
		}
		defer rec.Close()
	}
	srv, err := NewServer(sc, rec, Options{Chunk: *chunk, Logger: log})
	if err != nil {
		log.Error("model", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("model: listen", "addr", *listen, "err", err)
		return 1
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening on %s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		if *tlsCert != "" || *tlsKey != "" {
			errc <- hs.ServeTLS(ln, *tlsCert, *tlsKey)
			return
		}
		errc <- hs.Serve(ln)
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("model: serve", "err", err)
			return 1
		}
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return 0
}
