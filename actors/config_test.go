package actors_test

import (
	"errors"
	"math"
	"testing"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/stretchr/testify/require"
)

// Every configuration error wraps ErrInvalidConfig and keeps its message.
func TestConfigErrorsWrapErrInvalidConfig(t *testing.T) {
	bad := actors.DefaultHostConfig()
	bad.Shards = 0
	err := bad.Validate()
	require.ErrorIs(t, err, actors.ErrInvalidConfig)
	require.Equal(t, "actors: Shards 0 out of range [1, 65536]", err.Error())

	_, err = actors.NewHost(bad, actors.HostDeps{Store: memory.New()})
	require.ErrorIs(t, err, actors.ErrInvalidConfig)
	_, err = actors.NewHost(actors.DefaultHostConfig(), actors.HostDeps{})
	require.ErrorIs(t, err, actors.ErrInvalidConfig)

	fc := actors.DefaultFollowConfig()
	require.ErrorIs(t, fc.Validate(), actors.ErrInvalidConfig, "no Name")
	fc.Name = "f"
	require.NoError(t, fc.Validate())

	require.NoError(t, actors.DefaultHostConfig().Validate())
	require.False(t, errors.Is(actors.ErrClosed, actors.ErrInvalidConfig))
}

// BatchPace takes a finite factor, 0 or more.
func TestBatchPaceMustBeFinite(t *testing.T) {
	for _, pace := range []float64{-0.5, math.NaN(), math.Inf(1), math.Inf(-1)} {
		c := actors.DefaultHostConfig()
		c.BatchPace = pace
		err := c.Validate()
		require.ErrorIs(t, err, actors.ErrInvalidConfig, "BatchPace %v", pace)
		require.Contains(t, err.Error(), "BatchPace")
	}
	for _, pace := range []float64{0, 0.5, 1e9} {
		c := actors.DefaultHostConfig()
		c.BatchPace = pace
		require.NoError(t, c.Validate(), "BatchPace %v", pace)
	}
}
