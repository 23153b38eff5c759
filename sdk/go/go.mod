module github.com/queuecore/queuecore-go

go 1.21

require github.com/gorilla/websocket v1.5.0
