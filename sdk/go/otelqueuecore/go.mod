module github.com/queuecore/queuecore-go/otelqueuecore

go 1.21

require (
	github.com/queuecore/queuecore-go v0.0.0
	go.opentelemetry.io/otel v1.1.0
	go.opentelemetry.io/otel/sdk v1.1.0 // the tests' in-memory span recorder
	go.opentelemetry.io/otel/trace v1.1.0
)

// Developed beside the SDK; a tagged release replaces this with the SDK's version.
replace github.com/queuecore/queuecore-go => ../
