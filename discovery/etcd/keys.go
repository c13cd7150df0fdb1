package etcd

import (
	"strconv"

	"github.com/velo-go/velo/ext"
)

func servicesPrefix(cluster string) string { return "/velo/" + cluster + "/services/" }

func servicePrefix(cluster, service string) string {
	return servicesPrefix(cluster) + service + "/"
}

func serviceKey(cluster, service string, id ext.InstanceID) string {
	return servicePrefix(cluster, service) + id.String()
}

func instancePrefix(cluster string) string { return "/velo/" + cluster + "/peers/instance/" }

func instanceKey(cluster string, id ext.InstanceID) string {
	return instancePrefix(cluster) + id.String()
}

func workerKey(cluster string, w ext.WorkerID) string {
	return "/velo/" + cluster + "/peers/worker/" + strconv.FormatUint(uint64(w), 10)
}
