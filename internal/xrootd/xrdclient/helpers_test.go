package xrdclient

import (
	"io"

	"github.com/wanda-fed/wanda/internal/client"
)

type readCloser = io.ReadCloser

type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }

func bodyFunc(f func() (io.ReadCloser, error)) client.BodyFunc { return f }

var errUnexpectedEOF = io.ErrUnexpectedEOF

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }
