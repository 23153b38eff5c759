module github.com/queuecore/queuecore/bench/rolling/go_client

go 1.21

require github.com/queuecore/queuecore-go v0.0.0

replace github.com/queuecore/queuecore-go => ../../../sdk/go
