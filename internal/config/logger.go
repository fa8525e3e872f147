package config

import (
	"io"
	"log/slog"
)

// NewLogger builds the command's slog logger from --log-format and
// --log-level; the flags win over KVP2P_LOG_FORMAT and KVP2P_LOG_LEVEL.
func NewLogger(w io.Writer, format, level string, lookupEnv func(string) (string, bool)) (*slog.Logger, error) {
	if v, ok := lookupEnv(EnvPrefix + "LOG_FORMAT"); ok && format == "" {
		format = v
	}
	if v, ok := lookupEnv(EnvPrefix + "LOG_LEVEL"); ok && level == "" {
		level = v
	}
	var lvl slog.Level
	if level != "" {
		if err := lvl.UnmarshalText([]byte(level)); err != nil {
			return nil, Errorf("log-level: %q: want debug, info, warn or error", level)
		}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, Errorf("log-format: %q: want text or json", format)
}
