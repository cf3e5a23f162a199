module github.com/flotilla-dev/flotilla/services/net-controller

go 1.26.8

replace (
	github.com/flotilla-dev/flotilla/libs/apis => ../../libs/apis
	github.com/flotilla-dev/flotilla/libs/runtime => ../../libs/runtime
	github.com/flotilla-dev/flotilla/libs/testenv => ../../libs/testenv
	github.com/flotilla-dev/flotilla/services/net-controller/api => ./api
	github.com/flotilla-dev/flotilla/services/tenant-controller/api => ../tenant-controller/api
	k8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20260721132016-d427ff9ee9ad
)
