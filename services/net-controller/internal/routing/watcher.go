package routing

import (
	"errors"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Watch reports, on the returned channel, that rules, routes or links changed in namespace ns
// (netns.None() for the current one), whoever changed them. Notifications coalesce: one pending
// is enough to look again. Close stops it.
func Watch(ns netns.NsHandle) (<-chan struct{}, func(), error) {
	cur := netns.None()
	if ns.IsOpen() {
		var err error
		if cur, err = netns.Get(); err != nil {
			return nil, nil, err
		}
		defer cur.Close()
	}
	s, err := nl.SubscribeAt(ns, cur, unix.NETLINK_ROUTE,
		unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE, unix.RTNLGRP_IPV4_RULE, unix.RTNLGRP_IPV6_RULE, unix.RTNLGRP_LINK)
	if err != nil {
		return nil, nil, err
	}
	// A receive timeout lets the loop notice Close: closing the socket does not wake a receive.
	if err := s.SetReceiveTimeout(&unix.Timeval{Sec: 1}); err != nil {
		s.Close()
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			_, _, err := s.Receive()
			select {
			case <-done:
				return
			default:
			}
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EINTR) {
				continue // the timeout: nothing happened
			}
			// A message, or an overrun (ENOBUFS): events were lost, not the need to look again.
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, func() { close(done); s.Close() }, nil
}
