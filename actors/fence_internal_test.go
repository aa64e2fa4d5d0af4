package actors

import (
	"testing"

	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

func TestSenderFencesRoundTrip(t *testing.T) {
	var f senderFences
	require.Nil(t, f.encode())
	require.True(t, f.accept(7, 3))
	require.True(t, f.accept(2, 1))
	require.False(t, f.accept(7, 2), "a lower epoch changes nothing")
	require.False(t, f.accept(7, 3))
	require.True(t, f.accept(7, 4))
	require.True(t, f.accept(300, 1<<40))
	require.EqualValues(t, 4, f.epoch(7))
	require.EqualValues(t, 0, f.epoch(3))

	// The cached encoding is what EntityRecord's fields 5 and 6 decode to,
	// appended to the rest of a record.
	head, err := proto.Marshal(&ordopb.EntityRecord{State: []byte("s"), Seq: 9})
	require.NoError(t, err)
	var rec ordopb.EntityRecord
	require.NoError(t, proto.Unmarshal(append(head, f.enc...), &rec))
	require.Equal(t, []uint32{2, 7, 300}, rec.SenderShards)
	require.Equal(t, []int64{1, 4, 1 << 40}, rec.SenderEpochs)
	require.EqualValues(t, 9, rec.Seq)

	g, ok := loadSenderFences(&rec)
	require.True(t, ok)
	require.Equal(t, f.enc, g.enc)
	require.EqualValues(t, 4, g.epoch(7))

	for name, bad := range map[string]*ordopb.EntityRecord{
		"lengths differ": {SenderShards: []uint32{1, 2}, SenderEpochs: []int64{1}},
		"not ascending":  {SenderShards: []uint32{2, 1}, SenderEpochs: []int64{1, 1}},
		"shard twice":    {SenderShards: []uint32{1, 1}, SenderEpochs: []int64{1, 2}},
	} {
		_, ok := loadSenderFences(bad)
		require.False(t, ok, name)
	}
}
