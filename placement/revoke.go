package placement

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RevokeIfExpiring revokes lease only when etcd shows that its holder
// missed a renewal: a holder renewing every TTL/3 keeps the remaining TTL
// above about 2/3 of the granted TTL, so the lease is revoked when the
// remaining TTL (whole seconds, as etcd reports it) is at most
// granted - (ceil(granted/3) + 1), i.e. more than one keepalive interval
// plus a second of rounding has passed without a renewal. It reports
// whether it revoked; a lease already gone is not an error (false, nil).
//
// Safety never depends on this check: a holder that was alive after all is
// fenced by storage and rejoins under a new lease. Safe for concurrent use.
func RevokeIfExpiring(ctx context.Context, client *clientv3.Client, lease clientv3.LeaseID) (bool, error) {
	resp, err := client.TimeToLive(ctx, lease)
	if err != nil {
		if isLeaseNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("placement: time to live of lease %x: %w", int64(lease), err)
	}
	if resp.TTL <= -1 {
		return false, nil
	}
	granted := resp.GrantedTTL
	if resp.TTL > granted-((granted+2)/3+1) {
		return false, nil
	}
	if _, err := client.Revoke(ctx, lease); err != nil {
		if isLeaseNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("placement: revoke lease %x: %w", int64(lease), err)
	}
	return true, nil
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound)
}
