// Command etcd is the upstream etcd server (the same main as go.etcd.io/etcd/v3's main.go),
// at the etcd version that k8s.io/kubernetes pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
