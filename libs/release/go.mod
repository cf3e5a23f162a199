module github.com/flotilla-dev/flotilla/libs/release

go 1.26.8

require (
	github.com/fluxcd/pkg/oci v0.68.1
	github.com/google/go-containerregistry v0.21.6
	golang.org/x/crypto/x509roots/fallback v0.0.0-20261030153154-30a33513ff6d
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/Masterminds/semver/v3 v3.5.0 // indirect
	github.com/blang/semver/v4 v4.0.0 // indirect
	github.com/cyphar/filepath-securejoin v0.6.1 // indirect
	github.com/docker/cli v29.4.3+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.5 // indirect
	github.com/fluxcd/pkg/sourceignore v0.18.0 // indirect
	github.com/fluxcd/pkg/tar v1.2.0 // indirect
	github.com/fluxcd/pkg/version v0.16.0 // indirect
	github.com/klauspost/compress v1.18.6 // indirect
	github.com/kr/pretty v0.3.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	go.yaml.in/yaml/v2 v2.4.3 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.44.0 // indirect
	sigs.k8s.io/kustomize/api v0.21.1 // indirect
	sigs.k8s.io/kustomize/kyaml v0.21.1 // indirect
)
