package engineapi

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The step socket (Registered.step_socket in engine.proto): Step without
// gRPC, for the engine on this host. A gRPC call costs a Python client
// about 200 µs of CPU and, on a busy host, milliseconds of tail; a framed
// round trip on a Unix socket costs about a tenth of that. The requests,
// the checks and the answers are the gRPC Step's.

// StepSocketPath is where `kvp2p serve` puts the step socket of the engine
// API's Unix socket sock.
func StepSocketPath(sock string) string { return sock + ".step" }

// maxStepConns bounds the step socket's connections: an engine needs one
// (or a few, with several stepping threads).
const maxStepConns = 16

// stepWriteTimeout bounds writing one answer: an engine that stops reading
// loses its step connection, not a goroutine.
const stepWriteTimeout = 5 * time.Second

// errFrameTooLong is a request frame over the size limit.
var errFrameTooLong = errors.New("engineapi: step frame too long")

// AdvertiseSteps makes ln (a Unix listener, from ListenUnix) the step
// socket that engines attaching over a Unix socket are told of. Call it
// before serving the engine API, so that no engine attaches without
// hearing of it; ServeSteps does it too.
func (s *Server) AdvertiseSteps(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.stepLns, ln) {
		s.stepLns = append(s.stepLns, ln) // Stop closes it
	}
	if s.stepPath == "" {
		s.stepPath = ln.Addr().String()
	}
}

// ServeSteps serves the step socket on ln until Stop (AdvertiseSteps
// first). It returns nil after Stop.
func (s *Server) ServeSteps(ln net.Listener) error {
	s.AdvertiseSteps(ln)
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		ln.Close()
		return nil
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			stopped := s.stopped
			s.mu.Unlock()
			if stopped {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.mu.Lock()
		if s.stopped || len(s.stepConns) >= maxStepConns {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.stepConns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveStepConn(c)
			s.mu.Lock()
			delete(s.stepConns, c)
			s.mu.Unlock()
		}()
	}
}

// stepPathFor is the step socket to advertise on an Attach stream: only
// to an engine that came over a Unix socket (it shares the host).
func (s *Server) stepPathFor(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil || p.Addr.Network() != "unix" {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stepPath
}

// serveStepConn answers one connection's steps in order; it is the
// connection's one reader and one writer.
func (s *Server) serveStepConn(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	var in, out []byte
	var dec stepDecoder
	for {
		var err error
		in, err = readFrame(r, s.maxMsg, in)
		if err != nil {
			if errors.Is(err, errFrameTooLong) {
				out = appendStepError(out[:0], status.Error(codes.ResourceExhausted, err.Error()))
				_ = writeStep(c, out)
			}
			return
		}
		out = s.answerStep(&dec, out[:0], in)
		if err := writeStep(c, out); err != nil {
			return
		}
	}
}

// answerStep decodes and applies one step and appends its answer frame.
// The step's lookup keys are read from in itself (stepDecoder): in is not
// touched until the step has been answered, and the backend's Step keeps
// nothing of its request past its return (it copies keys into wire.Key).
func (s *Server) answerStep(dec *stepDecoder, out, in []byte) []byte {
	req, err := dec.decode(in)
	if err != nil {
		return appendStepError(out, status.Errorf(codes.InvalidArgument, "step frame: %v", err))
	}
	resp, err := s.Step(context.Background(), req)
	if err != nil {
		return appendStepError(out, err)
	}
	out = append(out, 0, 0, 0, 0, byte(codes.OK))
	out, err = proto.MarshalOptions{}.MarshalAppend(out, resp)
	if err != nil {
		return appendStepError(out[:0], status.Errorf(codes.Internal, "encoding the answer: %v", err))
	}
	binary.LittleEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// appendStepError appends the answer frame of a failed step.
func appendStepError(out []byte, err error) []byte {
	st := status.Convert(err)
	msg := st.Message()
	out = binary.LittleEndian.AppendUint32(out, uint32(1+len(msg)))
	out = append(out, byte(st.Code()))
	return append(out, msg...)
}

func writeStep(c net.Conn, frame []byte) error {
	if err := c.SetWriteDeadline(time.Now().Add(stepWriteTimeout)); err != nil {
		return err
	}
	_, err := c.Write(frame)
	return err
}

// readFrame reads one length-prefixed frame into buf (reused) and returns
// it. A frame longer than limit is errFrameTooLong, read no further: the
// length is checked before anything is allocated for it.
func readFrame(r io.Reader, limit int, buf []byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return buf, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if uint64(n) > uint64(limit) {
		return buf, fmt.Errorf("%w: %d bytes, at most %d", errFrameTooLong, n, limit)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, err
	}
	return buf, nil
}
