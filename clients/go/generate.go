// Package groupcoordclient holds the Go smoke client of groupcoord (cmd/smoke), built on the
// code generated from proto/groupcoord/v1 into the gen module.
package groupcoordclient

//go:generate ./generate.sh
