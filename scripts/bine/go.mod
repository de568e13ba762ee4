module onionmix.invalid/bine-check

go 1.22

require (
	github.com/cretz/bine v0.2.0
	golang.org/x/net v0.0.0-20210525063256-abc453219eb5
)

require (
	golang.org/x/crypto v0.0.0-20210513164829-c07d793c2f9a // indirect
	golang.org/x/sys v0.0.0-20210423082822-04245dca01da // indirect
)
