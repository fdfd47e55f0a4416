module github.com/vsr-dev/vsr

go 1.26.0
