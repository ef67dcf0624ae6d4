// Command kube-scheduler is the upstream kube-scheduler, built from the k8s.io/kubernetes module at the same
// version as the test kube-apiserver (the same main as k8s.io/kubernetes/cmd/kube-scheduler/scheduler.go). The
// pending-GPU tests run it against the test API server and compare its FailedScheduling verdicts with ours.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
