// Command etcd is the upstream etcd server, built from the Go module proxy
// (see ../build-k8s.sh) because no release download site is reachable.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
