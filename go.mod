module github.com/kvp2p/kvp2p

go 1.26.8

require go.uber.org/goleak v1.3.0

require go.yaml.in/yaml/v3 v3.0.6
