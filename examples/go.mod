module github.com/runclaim/runclaim/examples

go 1.26.0

require (
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/google/uuid v1.6.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/robfig/cron/v3 v3.0.1
	github.com/runclaim/runclaim v0.0.0
	github.com/runclaim/runclaim/cronlock v0.0.0
	github.com/runclaim/runclaim/gocronlock v0.0.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/runclaim/runclaim => ../

replace github.com/runclaim/runclaim/gocronlock => ../gocronlock

replace github.com/runclaim/runclaim/cronlock => ../cronlock
